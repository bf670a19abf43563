"""Ape-X DDPG and TD3 (Horgan et al. 2018): the deterministic-actor policies on distributed prioritized replay.

The training step is :class:`rlgear.plugins.families.replay.apex.ApexTrainer`; each worker's Ape-X epsilon is its
exploration noise's scale (``exploration_noise_scale``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.plugins.algorithms.ddpg.config import DDPGConfig, TD3Config
from rlgear.plugins.algorithms.ddpg.ddpg import DDPG, TD3
from rlgear.plugins.families.replay.apex import ApexTrainer
from rlgear.plugins.families.replay.apex_config import ApexConfig


@dataclass
class ApexDDPGConfig(ApexConfig, DDPGConfig):
    """DDPG's keys plus Ape-X's; ``exploration_noise_scale`` is set per worker by Ape-X's schedule."""


@dataclass
class ApexTD3Config(ApexConfig, TD3Config):
    """TD3's keys plus Ape-X's; ``exploration_noise_scale`` is set per worker by Ape-X's schedule."""


class NoiseScaleExploration:
    """Ape-X's per-worker epsilon, for a deterministic actor: its exploration noise's scale."""

    def worker_exploration(self, epsilon: float) -> dict[str, float]:
        return {"exploration_noise_scale": epsilon}


class ApexDDPG(NoiseScaleExploration, ApexTrainer, DDPG):
    name = "apex_ddpg"
    description = (
        "Ape-X DDPG: Ray rollout workers with per-worker noise scales feed sharded prioritized replay "
        "actors; continuous (Box) actions"
    )
    config_class = ApexDDPGConfig
    multi_agent = False


class ApexTD3(NoiseScaleExploration, ApexTrainer, TD3):
    name = "apex_td3"
    description = (
        "Ape-X over TD3 (twin critics, delayed policy updates, target smoothing); continuous actions"
    )
    config_class = ApexTD3Config
    multi_agent = False
