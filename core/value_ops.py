"""Return and advantage computations shared by every algorithm (numpy, ALF layout).

Layout (as in ALF): ``rewards[t]`` and ``discounts[t]`` arrive *with* step
``t``, i.e. ``rewards[t]`` is the reward for the action taken at ``t-1``. So the
return of step ``t`` is built from ``rewards[t+1]``, ``discounts[t+1]`` and
onward, and ``discounts`` must already be multiplied by gamma. The final row
``T-1`` only supplies the bootstrap value; outputs have ``T-1`` rows.

The truth table every function here follows:

=========  ========  ===================================  ======================
step type  discount  bootstrap from this step's value?    learn this step's value?
=========  ========  ===================================  ======================
FIRST      1         no                                   yes
MID        1         yes                                  yes
LAST       0         no (true terminal)                   no
LAST       1         yes (time limit: truncation)         no
=========  ========  ===================================  ======================

At a LAST step the return is the step's own value and the advantage is 0, so
nothing leaks across an episode boundary.
"""

from __future__ import annotations

import numpy as np

from rlgear.timestep import StepType


def _to_time_major(arrays: list[np.ndarray], time_major: bool) -> list[np.ndarray]:
    if time_major:
        return arrays
    return [np.swapaxes(a, 0, 1) if a.ndim > 1 else a for a in arrays]


def _time_major_inputs(
    rewards: np.ndarray, values: np.ndarray, step_types: np.ndarray, discounts: np.ndarray, time_major: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.dtype]:
    """The recursions' common start: checked shapes, time-major arrays, the LAST mask and the float
    dtype of the result (at least float32, float64 when the inputs are)."""
    _check_shapes(rewards, values, step_types, discounts, time_major)
    rewards, values, step_types, discounts = _to_time_major(
        [np.asarray(x) for x in (rewards, values, step_types, discounts)], time_major
    )
    return (
        rewards,
        values,
        step_types == StepType.LAST,
        discounts,
        np.result_type(rewards.dtype, values.dtype, np.float32),
    )


def _from_time_major(out: np.ndarray, time_major: bool) -> np.ndarray:
    return out if time_major or out.ndim < 2 else np.swapaxes(out, 0, 1)


def _check_shapes(rewards, values, step_types, discounts, time_major: bool) -> None:
    shape = np.shape(rewards)
    for name, arr in (("values", values), ("step_types", step_types), ("discounts", discounts)):
        if np.shape(arr) != shape:
            raise ValueError(f"{name} has shape {np.shape(arr)}, rewards has {shape}")
    time_axis = 0 if time_major or len(shape) < 2 else 1
    if len(shape) == 0 or shape[time_axis] < 2:
        raise ValueError(f"need at least 2 time steps (the last is the bootstrap), got {shape}")


def discounted_return(
    rewards: np.ndarray,
    values: np.ndarray,
    step_types: np.ndarray,
    discounts: np.ndarray,
    time_major: bool = True,
) -> np.ndarray:
    """Bootstrapped discounted returns ``G[t]`` for ``t < T-1``.

    ``G[t] = rewards[t+1] + discounts[t+1] * G[t+1]``, starting from
    ``G[T-1] = values[T-1]``; at a LAST step ``G[t] = values[t]``.

    Args:
        rewards, values, step_types, discounts: ``[T]`` or ``[T, B]``
            (``[B, T]`` when ``time_major=False``).
    Returns:
        ``[T-1, ...]`` (``[B, T-1]`` when ``time_major=False``).
    """
    rewards, values, is_last, discounts, dtype = _time_major_inputs(
        rewards, values, step_types, discounts, time_major
    )
    returns = np.empty(values.shape, dtype=dtype)
    returns[-1] = values[-1]
    for t in range(values.shape[0] - 2, -1, -1):
        accumulated = rewards[t + 1] + discounts[t + 1] * returns[t + 1]
        returns[t] = np.where(is_last[t], values[t], accumulated)
    returns = returns[:-1]
    return _from_time_major(returns, time_major)


def generalized_advantage_estimation(
    rewards: np.ndarray,
    values: np.ndarray,
    step_types: np.ndarray,
    discounts: np.ndarray,
    td_lambda: float = 1.0,
    time_major: bool = True,
) -> np.ndarray:
    """GAE advantages (Schulman et al. 2016, arXiv:1506.02438) for ``t < T-1``.

    ``delta[t] = rewards[t+1] + discounts[t+1] * values[t+1] - values[t]`` and
    ``A[t] = delta[t] + discounts[t+1] * td_lambda * A[t+1]``, with ``A[t] = 0``
    at LAST steps (which also stops the recursion at episode boundaries).
    ``td_lambda=1`` gives ``discounted_return - values``.
    """
    rewards, values, is_last, discounts, dtype = _time_major_inputs(
        rewards, values, step_types, discounts, time_major
    )
    deltas = rewards[1:] + discounts[1:] * values[1:] - values[:-1]
    weights = discounts[1:] * td_lambda
    advantages = np.zeros(values.shape, dtype=dtype)
    for t in range(values.shape[0] - 2, -1, -1):
        advantages[t] = np.where(is_last[t], 0.0, deltas[t] + weights[t] * advantages[t + 1])
    advantages = advantages[:-1]
    return _from_time_major(advantages, time_major)


def lambda_return(
    rewards: np.ndarray,
    values: np.ndarray,
    step_types: np.ndarray,
    discounts: np.ndarray,
    td_lambda: float = 1.0,
    time_major: bool = True,
) -> np.ndarray:
    """TD(lambda) returns ``G[t]`` for ``t < T-1`` (Sutton & Barto 2018, eq. 12.18, recursive form).

    ``G[t] = rewards[t+1] + discounts[t+1] * ((1 - td_lambda) * values[t+1] + td_lambda * G[t+1])``,
    starting from ``G[T-1] = values[T-1]``; at a LAST step ``G[t] = values[t]``. With ``values[t] =
    max_a Q(s_t, a)`` these are the Q(lambda) targets of PQN (Gallici et al. 2024, with Peng's
    Q(lambda): no trace cut at exploratory actions). ``td_lambda=1`` gives :func:`discounted_return`,
    ``td_lambda=0`` the one-step target ``rewards[t+1] + discounts[t+1] * values[t+1]``; in between
    ``G - values[:-1]`` is :func:`generalized_advantage_estimation` of the same inputs.

    Args:
        rewards, values, step_types, discounts: as in :func:`discounted_return`.
        td_lambda: weight of the longer returns; 0 is one-step TD, 1 Monte-Carlo with bootstrap.
    Returns:
        ``[T-1, ...]`` (``[B, T-1]`` when ``time_major=False``).
    """
    rewards, values, is_last, discounts, dtype = _time_major_inputs(
        rewards, values, step_types, discounts, time_major
    )
    returns = np.empty(values.shape, dtype=dtype)
    returns[-1] = values[-1]
    for t in range(values.shape[0] - 2, -1, -1):
        mixed = (1.0 - td_lambda) * values[t + 1] + td_lambda * returns[t + 1]
        returns[t] = np.where(is_last[t], values[t], rewards[t + 1] + discounts[t + 1] * mixed)
    returns = returns[:-1]
    return _from_time_major(returns, time_major)


def vtrace(
    log_rhos: np.ndarray,
    rewards: np.ndarray,
    values: np.ndarray,
    step_types: np.ndarray,
    discounts: np.ndarray,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    lambda_: float = 1.0,
    time_major: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """V-trace value targets and policy-gradient advantages (Espeholt et al. 2018, IMPALA, eq. 1-4).

    The off-policy correction for experience collected by a behaviour policy
    ``mu`` that lags behind the learner's target policy ``pi``. With
    ``rho[t] = min(clip_rho_threshold, exp(log_rhos[t]))`` and
    ``c[t] = lambda_ * min(clip_c_threshold, exp(log_rhos[t]))``::

        delta[t] = rho[t] * (rewards[t+1] + discounts[t+1] * values[t+1] - values[t])
        vs[t] = values[t] + delta[t] + discounts[t+1] * c[t] * (vs[t+1] - values[t+1])
        pg_advantages[t] = rho_pg[t] * (rewards[t+1] + discounts[t+1] * vs[t+1] - values[t])

    with ``rho_pg[t] = min(clip_pg_rho_threshold, exp(log_rhos[t]))``, starting
    from ``vs[T-1] = values[T-1]`` (the bootstrap row). The layout is the ALF
    one of the other functions here (``rewards[t]`` and ``discounts[t]`` arrive
    with step ``t``; ``discounts`` already multiplied by gamma); at a LAST step
    ``vs[t] = values[t]`` and ``pg_advantages[t] = 0`` (neither is learned) and
    the recursion restarts, so a terminated episode adds nothing after its
    LAST step and a truncated one bootstraps from its last value. On-policy
    (``log_rhos = 0``, thresholds >= 1) ``vs - values`` is the GAE(``lambda_``)
    advantage, and with ``lambda_=1`` ``vs`` is :func:`discounted_return`.

    Args:
        log_rhos: ``log pi(a_t|x_t) - log mu(a_t|x_t)`` of the action taken at
            step ``t`` (the value in the bootstrap row is not used).
        rewards, values, step_types, discounts: as in :func:`discounted_return`.
        clip_rho_threshold: rho-bar, clips the importance weights of the value
            targets (None: no clipping).
        clip_pg_rho_threshold: clips the importance weights of the
            policy-gradient advantages (None: no clipping).
        clip_c_threshold: c-bar, clips the trace-cutting coefficients (None: no clipping).
        lambda_: extra trace discount (Remark 2 of the paper; 1 is plain V-trace).
        time_major: inputs ``[T]`` or ``[T, B]`` if True, else ``[B, T]``.
    Returns:
        ``(vs, pg_advantages)``, each ``[T-1, ...]`` (``[B, T-1]`` when ``time_major=False``).
    """
    _check_shapes(rewards, values, step_types, discounts, time_major)
    if np.shape(log_rhos) != np.shape(rewards):
        raise ValueError(f"log_rhos has shape {np.shape(log_rhos)}, rewards has {np.shape(rewards)}")
    log_rhos, rewards, values, step_types, discounts = _to_time_major(
        [np.asarray(x) for x in (log_rhos, rewards, values, step_types, discounts)], time_major
    )
    is_last = step_types == StepType.LAST
    dtype = np.result_type(rewards.dtype, values.dtype, log_rhos.dtype, np.float32)
    rhos = np.exp(log_rhos[:-1].astype(dtype))

    def clipped(threshold: float | None) -> np.ndarray:
        return rhos if threshold is None else np.minimum(threshold, rhos)

    cs = lambda_ * clipped(clip_c_threshold)
    deltas = clipped(clip_rho_threshold) * (rewards[1:] + discounts[1:] * values[1:] - values[:-1])
    vs_minus_v = np.zeros(values.shape, dtype=dtype)
    for t in range(values.shape[0] - 2, -1, -1):
        accumulated = deltas[t] + discounts[t + 1] * cs[t] * vs_minus_v[t + 1]
        vs_minus_v[t] = np.where(is_last[t], 0.0, accumulated)
    vs_full = values + vs_minus_v
    pg_advantages = clipped(clip_pg_rho_threshold) * (rewards[1:] + discounts[1:] * vs_full[1:] - values[:-1])
    pg_advantages = np.where(is_last[:-1], 0.0, pg_advantages).astype(dtype)
    vs = vs_full[:-1].astype(dtype)
    return _from_time_major(vs, time_major), _from_time_major(pg_advantages, time_major)
