"""The adaptive KL coefficient of an APPO policy, written once for both backends.

The coefficient belongs to the policy (each policy of a multi-agent run adapts its own) and
rides in its checkpoint state (``meta["kl_coeff"]``). The policy's loss reports ``kl``, the
mean KL(pi_target || pi) over the learned steps; :meth:`AdaptiveKLCoeff.adapt_kl_coeff` reads
the last learner update's value, as RLlib's APPO does at every target update.
"""

from __future__ import annotations

from typing import Any

from rlgear.policy import PolicyState


def adapted_kl_coeff(kl_coeff: float, kl: float, kl_target: float) -> float:
    """Schulman et al. 2017, section 4 (PPO's adaptive KL penalty), with RLlib's factors 1.5 and 0.5."""
    if kl > 2.0 * kl_target:
        return kl_coeff * 1.5
    if kl < 0.5 * kl_target:
        return kl_coeff * 0.5
    return kl_coeff


class AdaptiveKLCoeff:
    """Mixed in before the backend's policy class; the TF policy backs ``kl_coeff`` with a variable."""

    kl_coeff: float
    last_kl: float | None = None

    def learn_on_batch(self, batch: Any) -> dict[str, float]:
        stats = super().learn_on_batch(batch)
        self.last_kl = stats.get("kl")
        stats["kl_coeff"] = float(self.kl_coeff)
        return stats

    def adapt_kl_coeff(self) -> None:
        """Adapt the coefficient from the last learner update's KL (nothing before the first one)."""
        training = self.config.training
        if training.use_kl_loss and training.kl_target is not None and self.last_kl is not None:
            self.kl_coeff = adapted_kl_coeff(float(self.kl_coeff), self.last_kl, training.kl_target)

    def get_state(self) -> PolicyState:
        state = super().get_state()
        state.meta["kl_coeff"] = float(self.kl_coeff)
        return state

    def set_state(self, state: PolicyState) -> None:
        super().set_state(state)
        if "kl_coeff" in state.meta:
            self.kl_coeff = float(state.meta["kl_coeff"])
