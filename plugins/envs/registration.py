"""The gymnasium ids rlgear registers, all behind one ``gymnasium.envs`` entry point (``rlgear``).

gymnasium loads that entry point for ids of the namespace ``rlgear/``; one entry point name can
point at one function, so this one registers every env rlgear ships: the goal-conditioned envs of
hindsight experience replay, the hard-exploration chain and Box-World.
"""

from __future__ import annotations

from rlgear.plugins.envs import boxworld, deep_chain, goal_envs


def register_envs() -> None:
    """Register ``rlgear/BitFlipping-v0``, ``rlgear/PointReach-v0``, ``rlgear/DeepChain-v0`` and ``rlgear/BoxWorld-v0``."""
    goal_envs.register_envs()
    deep_chain.register_envs()
    boxworld.register_envs()
