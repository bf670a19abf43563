"""BC and MARWIL hyperparameters; names and defaults as RLlib's (``rllib/algorithms/marwil``)."""

from __future__ import annotations

from dataclasses import dataclass

from rlgear.config.schema import doc
from rlgear.plugins.families.offline import OfflineTrainingConfig


@dataclass(frozen=True)
class MARWILLossSettings:
    """The numbers the loss reads, from either config class (BC: ``beta = 0``, no value loss)."""

    beta: float
    vf_coeff: float
    moving_average_sqd_adv_norm_start: float
    moving_average_sqd_adv_norm_update_rate: float
    bc_logstd_coeff: float


@dataclass
class BCConfig(OfflineTrainingConfig):
    """Behaviour cloning: maximise the log-likelihood of the dataset's actions."""

    lr: float = doc("Learning rate (Adam).", 1e-4)
    bc_logstd_coeff: float = doc(
        "Box actions: adds this times the mean log standard deviation of the Gaussian to each row's "
        "log-likelihood (RLlib's bc_logstd_coeff), so the policy stays stochastic where the data "
        "is; 0 is plain maximum likelihood. Continuous actions only.",
        0.0,
    )

    def loss_settings(self) -> MARWILLossSettings:
        return MARWILLossSettings(0.0, 0.0, 0.0, 0.0, self.bc_logstd_coeff)

    def check(self, fail) -> None:
        super().check(fail)
        if self.bc_logstd_coeff < 0:
            raise fail("training.bc_logstd_coeff", f"expected 0 or more, got {self.bc_logstd_coeff}")


@dataclass
class MARWILConfig(BCConfig):
    """Monotonic advantage re-weighted imitation learning (Wang et al. 2018, NeurIPS)."""

    beta: float = doc(
        "Inverse temperature of the advantage weights exp(beta * A / c): 0 is behaviour cloning "
        "(and then the value function is not trained).",
        1.0,
    )
    vf_coeff: float = doc("Weight of the value loss 0.5 * mean((R - V(s))^2).", 1.0)
    moving_average_sqd_adv_norm_start: float = doc(
        "Starting value of the moving average of the squared advantage, whose square root c "
        "scales the advantages.",
        100.0,
    )
    moving_average_sqd_adv_norm_update_rate: float = doc(
        "Rate of the moving average: c^2 += rate * (mean(A^2) - c^2) at every gradient step "
        "(RLlib's default 1e-8 keeps c at its start).",
        1e-8,
    )
    episode_buffer_size: int = doc(
        "Rows of whole episodes read ahead (their returns computed) and shuffled together before "
        "minibatches are cut from them.",
        10000,
    )

    def loss_settings(self) -> MARWILLossSettings:
        return MARWILLossSettings(
            self.beta,
            self.vf_coeff,
            self.moving_average_sqd_adv_norm_start,
            self.moving_average_sqd_adv_norm_update_rate,
            self.bc_logstd_coeff,
        )

    def check(self, fail) -> None:
        super().check(fail)
        if self.beta < 0:
            raise fail("training.beta", f"expected 0 or more, got {self.beta}")
        if self.vf_coeff < 0:
            raise fail("training.vf_coeff", f"expected 0 or more, got {self.vf_coeff}")
        if self.moving_average_sqd_adv_norm_start <= 0:
            raise fail(
                "training.moving_average_sqd_adv_norm_start",
                f"expected a positive number, got {self.moving_average_sqd_adv_norm_start}",
            )
        if not 0 <= self.moving_average_sqd_adv_norm_update_rate <= 1:
            raise fail(
                "training.moving_average_sqd_adv_norm_update_rate",
                f"expected a number in [0, 1], got {self.moving_average_sqd_adv_norm_update_rate}",
            )
        if self.episode_buffer_size < 1:
            raise fail(
                "training.episode_buffer_size", f"expected a positive integer, got {self.episode_buffer_size}"
            )
