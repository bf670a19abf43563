"""StatelessCartPole: CartPole-v1 with the velocities removed (positions only), for recurrent-policy tests.

The cart position and pole angle alone do not say where the pole is going; a
policy must remember earlier observations (an LSTM) to balance it for long.
As in sb3-contrib's ``CartPoleNoVel`` (rl-baselines3-zoo); used as
``env.name: tests.stateless_cartpole:StatelessCartPole``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

POSITIONS = [0, 2]  # x, theta (CartPole's observation is x, x_dot, theta, theta_dot)


class StatelessCartPole(gym.Wrapper):
    def __init__(self, max_episode_steps: int = 500):
        super().__init__(gym.wrappers.TimeLimit(CartPoleEnv(), max_episode_steps=max_episode_steps))
        high = self.env.observation_space.high[POSITIONS]
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        return obs[POSITIONS], info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs[POSITIONS], reward, terminated, truncated, info
