"""SAC's trainer: the shared replay training step; the policy updates its target critics itself."""

from __future__ import annotations

from rlgear.execution.replay_trainer import ReplayTrainer
from rlgear.plugins.algorithms.sac.config import SACConfig


class SAC(ReplayTrainer):
    name = "sac"
    description = (
        "Soft actor-critic: squashed Gaussian actor, twin critics, automatic entropy tuning; "
        "continuous (Box) actions"
    )
    config_class = SACConfig
    policies = {"torch": "rlgear.plugins.algorithms.sac.torch_policy:SACTorchPolicy"}
    action_spaces = frozenset({"continuous"})
