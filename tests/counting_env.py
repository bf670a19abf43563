"""CartPole that counts the observations it hands out (each reset and each step returns one).

For the observation-filter tests: the filter must have seen exactly that many observations.
"""

from __future__ import annotations

from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class CountingCartPole(CartPoleEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observations = 0

    def reset(self, **kwargs):
        self.observations += 1
        return super().reset(**kwargs)

    def step(self, action):
        self.observations += 1
        return super().step(action)


def observations_seen(evaluator) -> int:
    """Observations the envs of ``evaluator`` returned so far (a gymnasium sync vector env of these)."""
    return sum(env.unwrapped.observations for env in evaluator.env.env.envs)
