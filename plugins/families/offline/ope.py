"""Off-policy estimates of a target policy's value from episodes of a behaviour policy (numpy only).

Each estimator takes the dataset's episodes as plain arrays and the per-step importance ratios
``rho_t = pi_e(a_t|s_t) / pi_b(a_t|s_t)`` (target over behaviour probability of the action the data
took), and returns the estimated expected discounted return ``E[sum_t gamma^t r_t]`` of the target
policy from the data's start states. Definitions (Precup et al. 2000; Thomas 2015; Jiang & Li 2016;
RLlib's ``rllib/offline/estimators``), with ``G_i = sum_t gamma^t r_t`` the i-th episode's return
and ``p_t = rho_0 * ... * rho_t`` the cumulative ratio:

- ``is`` (trajectory-wise): ``mean_i p_{T-1}^(i) * G_i``; unbiased, variance grows with the horizon.
- ``wis`` (self-normalised): ``sum_i p_{T-1}^(i) G_i / sum_i p_{T-1}^(i)``; biased, consistent,
  never outside the range of the observed returns.
- ``pdis`` (per-decision, RLlib's ``is``): ``mean_i sum_t gamma^t p_t^(i) r_t^(i)``; a reward is
  weighted only by the ratios of the actions before it.
- ``pdwis`` (RLlib's ``wis``): ``mean_i sum_t gamma^t p_t^(i) / w_t * r_t^(i)``, where ``w_t`` is the
  mean of ``p_t`` over the episodes that last longer than ``t``.
- ``dr`` (Jiang & Li 2016, eq. 4): per episode, ``V_T = 0`` and backwards
  ``V_t = Vhat(s_t) + rho_t * (r_t + gamma * V_{t+1} - Qhat(s_t, a_t))``; the mean of ``V_0``. With
  ``Qhat`` the fitted Q evaluation's (:mod:`~rlgear.plugins.families.offline.fqe`) and
  ``Vhat(s) = sum_a pi_e(a|s) Qhat(s, a)``: unbiased like ``pdis``, with less variance the better
  ``Qhat`` is.

Ratios are formed from log-probabilities in float64; the trajectory weights ``p_{T-1}`` are
normalised in log space for ``wis`` so that long episodes do not overflow it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def importance_ratios(target_logp: np.ndarray, behaviour_logp: np.ndarray) -> np.ndarray:
    """float64 ``[T]`` per-step ratios ``pi_e(a_t|s_t) / pi_b(a_t|s_t)`` from both log-probabilities."""
    return np.exp(np.asarray(target_logp, np.float64) - np.asarray(behaviour_logp, np.float64))


def discounted_return(rewards: np.ndarray, gamma: float) -> float:
    """``sum_t gamma^t r_t`` of one episode."""
    rewards = np.asarray(rewards, np.float64)
    return float(np.sum(gamma ** np.arange(len(rewards)) * rewards))


def importance_sampling(rewards: Sequence[np.ndarray], ratios: Sequence[np.ndarray], gamma: float) -> float:
    """Trajectory-wise (ordinary) IS: ``mean_i (prod_t rho_t^(i)) * G_i``."""
    weights = np.array([np.prod(np.asarray(r, np.float64)) for r in ratios])
    returns = np.array([discounted_return(r, gamma) for r in rewards])
    return float(np.mean(weights * returns))


def weighted_importance_sampling(
    rewards: Sequence[np.ndarray], ratios: Sequence[np.ndarray], gamma: float
) -> float:
    """Self-normalised IS: ``sum_i w_i G_i / sum_i w_i`` with ``w_i = prod_t rho_t^(i)``
    (0 when every weight is 0: the target policy never takes the data's actions)."""
    with np.errstate(divide="ignore"):
        log_weights = np.array([np.sum(np.log(np.asarray(r, np.float64))) for r in ratios])
    returns = np.array([discounted_return(r, gamma) for r in rewards])
    if not np.any(np.isfinite(log_weights)):
        return 0.0
    weights = np.exp(log_weights - np.max(log_weights))
    return float(np.sum(weights * returns) / np.sum(weights))


def per_decision_importance_sampling(
    rewards: Sequence[np.ndarray], ratios: Sequence[np.ndarray], gamma: float
) -> float:
    """Per-decision IS: ``mean_i sum_t gamma^t p_t^(i) r_t^(i)``, ``p_t = rho_0 ... rho_t``."""
    values = [
        float(np.sum(_discounts(len(r), gamma) * np.cumprod(np.asarray(w, np.float64)) * r))
        for r, w in zip(rewards, ratios, strict=True)
    ]
    return float(np.mean(values))


def weighted_per_decision_importance_sampling(
    rewards: Sequence[np.ndarray], ratios: Sequence[np.ndarray], gamma: float
) -> float:
    """Per-decision weighted IS as RLlib's ``WeightedImportanceSampling``:
    ``mean_i sum_t gamma^t p_t^(i) / w_t * r_t^(i)``, ``w_t`` the mean ``p_t`` of the episodes
    longer than ``t`` (a step where all of them are 0 adds nothing)."""
    cumulative = [np.cumprod(np.asarray(w, np.float64)) for w in ratios]
    horizon = max((len(p) for p in cumulative), default=0)
    sums, counts = np.zeros(horizon), np.zeros(horizon)
    for p in cumulative:
        sums[: len(p)] += p
        counts[: len(p)] += 1
    mean_p = np.divide(sums, counts, out=np.zeros(horizon), where=counts > 0)
    values = []
    for r, p in zip(rewards, cumulative, strict=True):
        normalised = np.divide(p, mean_p[: len(p)], out=np.zeros(len(p)), where=mean_p[: len(p)] > 0)
        values.append(float(np.sum(_discounts(len(p), gamma) * normalised * r)))
    return float(np.mean(values))


def doubly_robust(
    rewards: Sequence[np.ndarray],
    ratios: Sequence[np.ndarray],
    q_taken: Sequence[np.ndarray],
    state_values: Sequence[np.ndarray],
    gamma: float,
) -> float:
    """Jiang & Li's doubly robust estimate: the mean of each episode's ``V_0`` from
    ``V_t = state_values_t + rho_t (r_t + gamma V_{t+1} - q_taken_t)``, ``V_T = 0``.

    ``q_taken`` is the model's ``Qhat(s_t, a_t)`` of the data's actions, ``state_values`` its
    ``Vhat(s_t) = sum_a pi_e(a|s_t) Qhat(s_t, a)``, each ``[T]`` per episode.
    """
    values = []
    for r, w, q, v in zip(rewards, ratios, q_taken, state_values, strict=True):
        value = 0.0
        for t in reversed(range(len(r))):
            value = float(v[t]) + float(w[t]) * (float(r[t]) + gamma * value - float(q[t]))
        values.append(value)
    return float(np.mean(values))


#: The ratio-based estimators by their result key (``offline/ope/<key>``).
RATIO_ESTIMATORS = {
    "is": importance_sampling,
    "wis": weighted_importance_sampling,
    "pdis": per_decision_importance_sampling,
    "pdwis": weighted_per_decision_importance_sampling,
}


def _discounts(steps: int, gamma: float) -> np.ndarray:
    return gamma ** np.arange(steps, dtype=np.float64)
