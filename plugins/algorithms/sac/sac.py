"""SAC's trainer: the shared replay training step; the policy updates its target critics itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.plugins.algorithms.sac.config import SACConfig
from rlgear.plugins.families.gsde import check_sde_action_space
from rlgear.plugins.families.replay.replay_trainer import ReplayTrainer

# Keys the policy reads once, when it builds log_alpha and its optimizer (and gSDE's policy class and
# log_std's shape): reset_config can't apply them.
_BUILT_ONCE = ("tune_alpha", "initial_alpha", "use_sde", "full_std")


class SAC(ReplayTrainer):
    name = "sac"
    description = (
        "Soft actor-critic: squashed Gaussian actor, twin critics, automatic entropy tuning; "
        "continuous (Box) actions, and Discrete ones with a categorical actor (Christodoulou 2019)"
    )
    config_class = SACConfig
    policies = {
        "torch": "rlgear.plugins.algorithms.sac.torch_policy:SACTorchPolicy",
        "tf": "rlgear.plugins.algorithms.sac.tf_policy:SACTFPolicy",
    }
    action_spaces = frozenset({"continuous", "discrete"})

    @classmethod
    def check_spaces(cls, config: RunConfig, observation_space: Any, action_space: Any) -> None:
        """As the replay trainer's; ``training.use_sde`` also needs Box actions (discrete SAC has none)."""
        super().check_spaces(config, observation_space, action_space)
        check_sde_action_space(config, action_space)

    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """As :meth:`ReplayTrainer.reset_config`; False also when ``tune_alpha``, ``initial_alpha`` or
        the gSDE keys change (log alpha, whether the optimizer moves it and the gSDE actor are fixed
        when the policy is built). Subclass configs without gSDE (CrossQ's) compare the keys they have."""
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.training, new_config.training
        built_once = [key for key in _BUILT_ONCE if hasattr(old, key)]
        if any(getattr(old, key) != getattr(new, key) for key in built_once):
            return False
        return super().reset_config(new_config)
