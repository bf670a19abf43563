"""CQL (continuous) hyperparameters: SAC's loss keys, the offline loop's keys and the penalty's.

The actor, critics and temperature are SAC's (so a CQL checkpoint's weights load into ``sac`` to
continue online), and the keys that shape SAC's loss keep SAC's names and meaning. The names of
CQL's own keys are RLlib's (``min_q_weight``, ``temperature``); ``num_sampled_actions`` is its
``num_actions``, renamed because here ``num_actions`` means the action dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlgear.config.schema import doc
from rlgear.plugins.families.offline import OfflineTrainingConfig


@dataclass
class CQLConfig(OfflineTrainingConfig):
    """Conservative Q-learning (Kumar et al. 2020) on SAC (Haarnoja et al. 2018), offline."""

    # SAC's policy acts uniformly before learning_starts env steps; offline there are none.
    learning_starts: ClassVar[int] = 0

    lr: float = doc("Learning rate (Adam) of the actor, the critics and the temperature.", 3e-4)
    tau: float = doc(
        "Polyak averaging of the target critics after every gradient step: "
        "target <- tau * online + (1 - tau) * target.",
        0.005,
    )
    initial_alpha: float = doc("SAC's entropy temperature alpha at the start.", 1.0)
    tune_alpha: bool = doc(
        "Tune alpha towards target_entropy as SAC does; false keeps initial_alpha fixed.", True
    )
    target_entropy: float | None = doc(
        "The entropy alpha is tuned towards, in the squashed [-1, 1] action space (null: -|A|).", None
    )
    min_q_weight: float = doc(
        "Weight of the conservative penalty (Kumar et al. 2020's alpha), added to SAC's critic loss "
        "0.5 * sum_k mean((Q_k - y)^2): sum over the critics of mean(temperature * logsumexp(Q_k(s, "
        "a_i) / temperature - ...) - Q_k(s, a_data)). RLlib's default 5.0; 0 is offline SAC.",
        5.0,
    )
    num_sampled_actions: int = doc(
        "Actions per row of each kind in the logsumexp: this many uniform in [-1, 1], as many from "
        "the actor at s and at s' (each importance-weighted by its density, CQL(H), appendix F).",
        10,
    )
    temperature: float = doc(
        "Temperature of the logsumexp: temperature * logsumexp(Q / temperature) (RLlib's key; 1.0 "
        "is the paper's).",
        1.0,
    )

    def check(self, fail) -> None:
        super().check(fail)
        if not 0 < self.tau <= 1:
            raise fail("training.tau", f"expected a number in (0, 1], got {self.tau}")
        if self.initial_alpha <= 0:
            raise fail("training.initial_alpha", f"expected a positive number, got {self.initial_alpha}")
        if self.min_q_weight < 0:
            raise fail("training.min_q_weight", f"expected 0 or more, got {self.min_q_weight}")
        if self.num_sampled_actions < 1:
            raise fail(
                "training.num_sampled_actions", f"expected a positive integer, got {self.num_sampled_actions}"
            )
        if self.temperature <= 0:
            raise fail("training.temperature", f"expected a positive number, got {self.temperature}")
