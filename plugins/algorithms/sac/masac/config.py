"""MASAC's hyperparameters: SAC's, plus the shared actor's agent id; gSDE and HER are refused."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.schema import doc
from rlgear.plugins.algorithms.sac.config import SACConfig


@dataclass
class MASACConfig(SACConfig):
    agent_id: bool = doc(
        "Give the shared actor each agent's one-hot index among the env's possible_agents besides its "
        "observation, so one network can act differently per agent (PyMARL's obs_agent_id).",
        True,
    )

    def check(self, fail) -> None:
        super().check(fail)
        if self.her_strategy is not None:
            raise fail("training.her_strategy", "masac does not relabel goals; remove the key")
        if self.use_sde:
            raise fail(
                "training.use_sde",
                "masac samples each agent's squashed Gaussian; gSDE is not built for teams",
            )
