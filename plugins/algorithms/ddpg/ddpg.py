"""DDPG's and TD3's trainers: the shared replay training step; the policy moves its targets itself."""

from __future__ import annotations

from rlgear.plugins.algorithms.ddpg.config import DDPGConfig, TD3Config
from rlgear.plugins.families.replay.replay_trainer import ReplayTrainer

_POLICIES = {
    "torch": "rlgear.plugins.algorithms.ddpg.torch_policy:DDPGTorchPolicy",
    "tf": "rlgear.plugins.algorithms.ddpg.tf_policy:DDPGTFPolicy",
}


class DDPG(ReplayTrainer):
    name = "ddpg"
    description = "Deep deterministic policy gradient (TD3's changes as switches); continuous (Box) actions"
    config_class = DDPGConfig
    policies = _POLICIES
    action_spaces = frozenset({"continuous"})


class TD3(DDPG):
    name = "td3"
    description = (
        "Twin delayed DDPG: twin critics, delayed policy updates, target policy smoothing; "
        "continuous (Box) actions"
    )
    config_class = TD3Config
