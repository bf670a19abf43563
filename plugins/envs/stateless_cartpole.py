"""StatelessCartPole: CartPole-v1 with the velocities removed (positions only), a memory task.

The cart position and pole angle alone do not say where the pole is going; a
policy must remember earlier observations (``model.lstm``) to balance it for
long. As sb3-contrib's ``CartPoleNoVel`` (rl-baselines3-zoo's RecurrentPPO
benchmark). Why it ships in the package: a config names an env by a gymnasium
id or an importable ``module:Class``, so the recurrent example
``configs/ppo-lstm-stateless-cartpole.yaml`` can name it
(``env.name: rlgear.plugins.envs.stateless_cartpole:StatelessCartPole``) from
any folder; it needs only gymnasium's classic-control CartPole, which the core
install already has.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

POSITIONS = [0, 2]  # x, theta (CartPole's observation is x, x_dot, theta, theta_dot)


class StatelessCartPole(gym.Wrapper):
    """CartPole-v1 (500-step time limit) observing only the cart position and the pole angle."""

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
