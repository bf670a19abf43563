"""TRPO's policy step, framework-free: conjugate gradient, the step size, the backtracking line search.

Schulman et al. 2015 (section 6 and appendix C), as sb3-contrib's ``TRPO.train`` runs it:

1. ``g``: the gradient of the surrogate ``L(theta) = mean(pi_theta(a|s) / pi_old(a|s) * A)`` at the
   policy that sampled the batch;
2. ``x``: ``cg_iters`` steps of conjugate gradient on ``(F + damping I) x = g``, where ``F v`` is the
   Fisher-vector product, the Hessian of the mean ``KL(pi_old || pi_theta)`` times ``v`` by double
   backpropagation (the backend's part: the Fisher matrix is never formed);
3. the largest step along ``x`` the quadratic model of the KL allows:
   ``beta = sqrt(2 max_kl / x^T (F + damping I) x)``;
4. a backtracking line search: ``theta_old + shrink^k beta x`` for ``k = 0, 1, ...``, the first that
   keeps the exact mean KL within ``max_kl`` and improves the surrogate is taken; if none of
   ``line_search_max_iter`` does, the policy stays as it was (``step_accepted: 0``).

The vectors live in numpy float64 on the host: a policy MLP has a few thousand weights, so the
``cg_iters + line_search_max_iter`` round trips cost little next to the forward passes, and one
implementation serves every backend. A backend supplies a :class:`PolicyStepProblem` per batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rlgear.sample_batch import SampleBatch


def conjugate_gradient(
    matvec: Callable[[np.ndarray], np.ndarray], b: np.ndarray, max_iters: int, residual_tol: float = 1e-10
) -> np.ndarray:
    """Approximately solve ``A x = b`` for a symmetric positive-definite ``A`` known only through
    ``matvec`` (Hestenes & Stiefel 1952), from ``x = 0``; stops early when ``|r|^2 < residual_tol``."""
    x = np.zeros_like(b, dtype=np.float64)
    r = np.array(b, dtype=np.float64)
    p = r.copy()
    rr = float(r @ r)
    for _ in range(max_iters):
        if rr < residual_tol:
            break
        ap = np.asarray(matvec(p), dtype=np.float64)
        alpha = rr / float(p @ ap)
        x += alpha * p
        r -= alpha * ap
        rr_new = float(r @ r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


@dataclass(frozen=True)
class LineSearchResult:
    """Where the backtracking line search stopped."""

    accepted: bool
    #: step fractions tried (1 for a full step taken at once)
    steps: int
    #: the fraction of the full step taken (0 when rejected)
    fraction: float
    #: the surrogate and mean KL at the point taken (at the old policy when rejected: KL 0)
    surrogate: float
    kl: float


def backtracking_line_search(
    evaluate: Callable[[float], tuple[float, float]],
    surrogate_before: float,
    max_kl: float,
    shrink: float,
    max_iters: int,
) -> LineSearchResult:
    """Try step fractions ``1, shrink, shrink^2, ...``; take the first whose ``evaluate(fraction)``
    ``(surrogate, kl)`` has ``kl <= max_kl`` and ``surrogate > surrogate_before``.

    ``evaluate`` moves the policy to that fraction of the full step and measures it; the caller puts
    the old policy back when the result is not accepted.
    """
    fraction = 1.0
    for step in range(1, max_iters + 1):
        surrogate, kl = evaluate(fraction)
        if math.isfinite(surrogate) and math.isfinite(kl) and kl <= max_kl and surrogate > surrogate_before:
            return LineSearchResult(True, step, fraction, surrogate, kl)
        fraction *= shrink
    return LineSearchResult(False, max_iters, 0.0, surrogate_before, 0.0)


class PolicyStepProblem(Protocol):
    """One batch's policy step as a backend computes it; vectors are flat numpy arrays over the
    policy step's weights (the ``policy/`` ones and an image trunk's, in :attr:`names` order), the
    value net left out."""

    #: the neutral names of the weights, in the order the flat vectors concatenate them
    names: list[str]

    def get_params(self) -> np.ndarray:
        """The policy weights, flat."""
        ...

    def set_params(self, flat: np.ndarray) -> None:
        """Load flat policy weights."""
        ...

    def surrogate_and_gradient(self) -> tuple[float, np.ndarray, float]:
        """``(L, dL/dtheta, mean entropy)`` at the current weights."""
        ...

    def fisher_vector_product(self, v: np.ndarray) -> np.ndarray:
        """``F v``: the Hessian of the mean ``KL(pi_old || pi_theta)`` at ``theta = theta_old``
        times ``v`` (undamped)."""
        ...

    def surrogate_and_kl(self) -> tuple[float, float]:
        """``(L, mean KL(pi_old || pi_theta))`` at the current weights."""
        ...

    def unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """A flat vector as ``{neutral name: array}`` in the neutral layout (for tests and tools)."""
        ...

    def flatten(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """The inverse of :meth:`unflatten`."""
        ...


def normalized_advantages(batch: SampleBatch) -> SampleBatch:
    """``batch`` with its advantages at mean 0 and std 1 (unbiased, + 1e-8), as the backends'
    ``normalize_advantages`` does it, once over the whole train batch."""
    advantages = np.asarray(batch[SampleBatch.ADVANTAGES], np.float64)
    if advantages.size > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std(ddof=1) + 1e-8)
    return SampleBatch({**batch, SampleBatch.ADVANTAGES: advantages.astype(np.float32)})


def natural_gradient_step(problem: PolicyStepProblem, training: Any) -> dict[str, float]:
    """Steps 1-4 of the module docstring on ``problem``; the step's statistics.

    ``step_accepted`` is 1 when the policy moved; when the line search found no acceptable point,
    or the gradient or the step is not finite, it is 0 and the policy is as it was. ``finite`` (0/1)
    says whether the gradient and the step were finite.
    """
    theta_old = problem.get_params()
    surrogate_before, gradient, entropy = problem.surrogate_and_gradient()
    damping = float(training.cg_damping)

    def damped_fvp(v: np.ndarray) -> np.ndarray:
        return problem.fisher_vector_product(v) + damping * v

    stats = {
        "surrogate": surrogate_before,
        "entropy": entropy,
        "policy_grad_norm": float(np.linalg.norm(gradient)),
        "kl": 0.0,
        "surrogate_improvement": 0.0,
        "line_search_steps": 0.0,
        "step_accepted": 0.0,
        "step_fraction": 0.0,
        "expected_improvement": 0.0,
        "finite": 0.0,
    }
    if not (math.isfinite(surrogate_before) and np.isfinite(gradient).all()):
        return stats
    direction = conjugate_gradient(damped_fvp, gradient, int(training.cg_iters))
    curvature = float(direction @ damped_fvp(direction))
    if not (math.isfinite(curvature) and curvature > 0 and np.isfinite(direction).all()):
        return stats
    stats["finite"] = 1.0
    full_step = math.sqrt(2.0 * float(training.max_kl) / curvature) * direction
    # predicted improvement of the full step, to the first order: g . step
    stats["expected_improvement"] = float(gradient @ full_step)

    def evaluate(fraction: float) -> tuple[float, float]:
        problem.set_params(theta_old + fraction * full_step)
        return problem.surrogate_and_kl()

    result = backtracking_line_search(
        evaluate,
        surrogate_before,
        float(training.max_kl),
        float(training.line_search_shrink),
        int(training.line_search_max_iter),
    )
    if not result.accepted:
        problem.set_params(theta_old)
    stats.update(
        kl=result.kl,
        surrogate_improvement=result.surrogate - surrogate_before,
        line_search_steps=float(result.steps),
        step_accepted=float(result.accepted),
        step_fraction=result.fraction,
    )
    return stats
