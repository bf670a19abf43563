"""StatelessCartPole for recurrent-policy tests: the env now ships in the package.

It lives in :mod:`rlgear.plugins.envs.stateless_cartpole`, so that the shipped config
``configs/ppo-lstm-stateless-cartpole.yaml`` can name it; this module keeps the older
``env.name: tests.stateless_cartpole:StatelessCartPole`` resolving to the same class.
"""

from __future__ import annotations

from rlgear.plugins.envs.stateless_cartpole import POSITIONS, StatelessCartPole

__all__ = ["POSITIONS", "StatelessCartPole"]
