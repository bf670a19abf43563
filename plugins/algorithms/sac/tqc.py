"""TQC's trainer: SAC's (the shared replay loop; the policy moves its target critics itself).

Kuznetsov et al. 2020 ("Controlling Overestimation Bias with Truncated Mixture of Continuous
Distributional Quantile Critics"): SAC's actor and temperature with ``n_critics`` distributional
critics of ``n_quantiles`` atoms each. The target pools every target critic's atoms at
``(s', a' ~ pi)``, sorts them, drops the ``top_quantiles_to_drop_per_net x n_critics`` largest (the
overestimation control) and subtracts ``alpha log pi(a'|s')``; every critic regresses on all kept
atoms with the quantile Huber loss; the actor maximises the mean of all atoms minus ``alpha log pi``.
The losses are in ``tqc_torch_policy`` / ``tqc_tf_policy``, subclasses of SAC's policies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.plugins.algorithms.sac.sac import SAC
from rlgear.plugins.algorithms.sac.tqc_config import TQCConfig


class TQC(SAC):
    name = "tqc"
    description = (
        "Truncated quantile critics: SAC's actor and temperature, distributional critics whose pooled "
        "target atoms lose their top ones; continuous (Box) actions"
    )
    config_class = TQCConfig
    policies = {
        "torch": "rlgear.plugins.algorithms.sac.tqc_torch_policy:TQCTorchPolicy",
        "tf": "rlgear.plugins.algorithms.sac.tqc_tf_policy:TQCTFPolicy",
    }
    action_spaces = frozenset({"continuous"})

    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """As SAC's; False also when ``n_critics`` or ``n_quantiles`` change (the critics' shapes)."""
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.training, new_config.training
        if any(getattr(old, key) != getattr(new, key) for key in ("n_critics", "n_quantiles")):
            return False
        return super().reset_config(new_config)
