"""MADDPG's hyperparameters: DDPG's (TD3's switches included) plus the actor's agent id; MATD3's are
the same keys with TD3's defaults."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.schema import doc
from rlgear.plugins.algorithms.ddpg.config import DDPGConfig, TD3Config


@dataclass
class MADDPGConfig(DDPGConfig):
    agent_id: bool = doc(
        "Give the shared actor each agent's one-hot index among the env's possible_agents besides its "
        "observation, so one network can act differently per agent (PyMARL's obs_agent_id).",
        True,
    )

    def check(self, fail) -> None:
        super().check(fail)
        if self.her_strategy is not None:
            raise fail("training.her_strategy", "maddpg does not relabel goals; remove the key")


@dataclass
class MATD3Config(TD3Config, MADDPGConfig):
    """MATD3 (Ackermann et al. 2019): MADDPG's keys with TD3's defaults (twin_q, policy_delay 2,
    target_noise 0.2), inherited from :class:`TD3Config` (first among the bases: a dataclass takes
    each field's default from the last base in reverse MRO that defines it)."""
