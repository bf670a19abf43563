"""APPO hyperparameters: the V-trace learner's, PPO's clip, an optional KL term and the target network.

Defaults after RLlib's APPO (clip 0.4, KL off with coefficient 1 and target 0.01, a hard
target update), except ``num_sgd_iter`` and ``target_network_update_freq``, which are
counted here in passes and in env steps (see their help).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.schema import doc
from rlgear.plugins.families.onpolicy import SGDSchedule
from rlgear.plugins.families.vtrace.config import VTraceConfig


@dataclass
class APPOConfig(VTraceConfig):
    num_sgd_iter: int = doc(
        "Passes over each learner batch; V-trace and the ratios are recomputed on every pass, and the "
        "clip keeps later passes near the target policy (PPO's epochs).",
        2,
    )
    clip_param: float = doc(
        "Clip range epsilon of the probability ratio pi / pi_target (pi / mu without a target network).",
        0.4,
    )
    use_target_network: bool = doc(
        "Take the surrogate's ratios and V-trace's importance weights against a target network (a "
        "lagging copy of the learner's, as RLlib's APPO does); false: against the behaviour policy "
        "(the log-probabilities the workers acted with), as IMPALA does.",
        True,
    )
    target_network_update_freq: int = doc(
        "Env steps learned on between target-network updates (each learner batch counts its "
        "train_batch_size env steps once, whatever num_sgd_iter). The KL coefficient adapts at the "
        "same moments.",
        2000,
    )
    tau: float = doc("Target-network update: target <- tau * learner + (1 - tau) * target (1.0 copies).", 1.0)
    use_kl_loss: bool = doc(
        "Add kl_coeff * KL(pi_target || pi), averaged over the learned steps, to the loss (needs "
        "use_target_network).",
        False,
    )
    kl_coeff: float = doc("Initial weight of the KL term.", 1.0)
    kl_target: float | None = doc(
        "Adapt kl_coeff at every target update, as PPO's adaptive-KL variant and RLlib's APPO do: "
        "x1.5 when the last learner update's mean KL exceeded 2 x kl_target, x0.5 when it was "
        "below kl_target / 2 (null: keep kl_coeff fixed).",
        0.01,
    )

    def sgd_schedule(self) -> SGDSchedule:
        """``num_sgd_iter`` passes over each learner batch, one gradient step on the whole batch each."""
        return SGDSchedule(num_epochs=self.num_sgd_iter)

    def check(self, fail) -> None:
        super().check(fail)
        if self.clip_param <= 0:
            raise fail("training.clip_param", f"expected a positive number, got {self.clip_param}")
        if self.target_network_update_freq < 1:
            raise fail(
                "training.target_network_update_freq",
                f"expected a positive integer (env steps), got {self.target_network_update_freq}",
            )
        if not 0 < self.tau <= 1:
            raise fail("training.tau", f"expected a number in (0, 1] (1.0 is a hard copy), got {self.tau}")
        if self.kl_coeff < 0:
            raise fail("training.kl_coeff", f"expected 0 or more, got {self.kl_coeff}")
        if self.kl_target is not None and self.kl_target <= 0:
            raise fail("training.kl_target", f"expected a positive number or null, got {self.kl_target}")
        if self.use_kl_loss and not self.use_target_network:
            raise fail(
                "training.use_kl_loss",
                "the KL term is taken against the target network; set training.use_target_network: true "
                "or training.use_kl_loss: false",
            )
