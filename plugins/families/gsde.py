"""Generalized state-dependent exploration (gSDE, Raffin et al. 2021, arXiv:2005.05719): its config
keys and the numpy pieces every backend shares.

The exploring action is ``mean(s) + eps(s)`` with ``eps(s) = theta^T z(s)``: ``z(s)`` the policy's
last hidden features (detached, Stable-Baselines3's ``learn_features=False``) and ``theta`` a
``[features, actions]`` matrix drawn from ``N(0, sigma^2)``, ``sigma = exp(log_std)`` learned. For
a fixed ``theta`` the noise is a deterministic function of the state (smooth exploration); over
``theta`` the action is Gaussian with variance ``sum_j z_j(s)^2 sigma_jk^2`` per action ``k``: the
distribution the losses use. ``theta`` is drawn per env and redrawn every ``sde_sample_freq``
steps of that env (``-1``: only when the acting weights change, i.e. once per rollout of the
updated policy, SB3's per-rollout resampling).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.config.schema import doc

#: Added to the variance before its square root, as Stable-Baselines3's ``StateDependentNoiseDistribution``.
SDE_EPSILON = 1e-6


@dataclass
class GSDEConfig:
    """The gSDE keys (Stable-Baselines3's names and defaults); mixed into an algorithm's config."""

    use_sde: bool = doc(
        "Generalized state-dependent exploration (Raffin et al. 2021): the exploration noise is "
        "theta^T z(s), z the policy's last hidden features, theta ~ N(0, exp(log_std)^2) redrawn "
        "every sde_sample_freq steps. Box actions.",
        False,
    )
    sde_sample_freq: int = doc(
        "With use_sde: redraw each env's noise matrix every this many of its steps; -1 only when "
        "the acting weights change (once per rollout, as Stable-Baselines3).",
        -1,
    )
    log_std_init: float = doc("With use_sde: the initial value of every entry of log_std.", 0.0)
    full_std: bool = doc(
        "With use_sde: one sigma per (feature, action) pair; false: one per feature, shared by the actions.",
        True,
    )
    use_expln: bool = doc(
        "With use_sde: sigma = expln(log_std) (exp below 0, log1p(x) + 1 above: grows slowly) instead "
        "of exp(log_std).",
        False,
    )

    def check_sde(self, fail) -> None:
        if self.sde_sample_freq != -1 and self.sde_sample_freq <= 0:
            raise fail(
                "training.sde_sample_freq", f"expected -1 or a positive integer, got {self.sde_sample_freq}"
            )


def sde_std(log_std: np.ndarray, num_actions: int, use_expln: bool) -> np.ndarray:
    """``sigma`` ``[features, actions]`` from ``log_std`` (``[features, actions]`` or ``[features, 1]``)."""
    log_std = np.asarray(log_std, np.float64)
    if use_expln:
        sigma = np.where(log_std <= 0, np.exp(np.minimum(log_std, 0)), np.log1p(np.maximum(log_std, 0)) + 1.0)
    else:
        sigma = np.exp(log_std)
    return np.broadcast_to(sigma, (sigma.shape[0], num_actions))


class SDENoise:
    """The per-env exploration matrices of gSDE and when they are redrawn (the acting side's state).

    ``matrices`` ``[envs, features, actions]`` (float32); per env, ``steps`` acted with its current
    matrix and the weights ``drawn_at`` (version) it was drawn under. Grows to the largest ``env_id`` seen.
    """

    def __init__(self, sample_freq: int, seed: int | None):
        self.sample_freq = sample_freq
        self.rng = np.random.default_rng(None if seed is None else [seed, 7])
        self.matrices = np.zeros((0, 0, 0), np.float32)
        self.steps = np.zeros(0, np.int64)
        self.drawn_at = np.zeros(0, np.int64)

    def noise(self, features: np.ndarray, env_ids: np.ndarray, sigma: np.ndarray, version: int) -> np.ndarray:
        """``eps = theta_env^T z`` ``[B, actions]`` for features ``[B, F]``, first redrawing (from
        ``N(0, sigma^2)``, ``sigma`` ``[F, actions]``) the matrices of the envs that are due: drawn
        under other weights than ``version`` (a new rollout), or used ``sample_freq`` steps."""
        env_ids = np.asarray(env_ids, np.int64)
        shape = tuple(sigma.shape)
        needed = max(len(self.steps), int(env_ids.max()) + 1 if len(env_ids) else 0)
        if self.matrices.shape[1:] != shape:
            self.matrices = np.zeros((needed, *shape), np.float32)
            self.steps, self.drawn_at = np.zeros(needed, np.int64), np.full(needed, -1, np.int64)
        elif needed > len(self.steps):
            extra = needed - len(self.steps)
            self.matrices = np.concatenate([self.matrices, np.zeros((extra, *shape), np.float32)])
            self.steps = np.concatenate([self.steps, np.zeros(extra, np.int64)])
            self.drawn_at = np.concatenate([self.drawn_at, np.full(extra, -1, np.int64)])
        due = self.drawn_at[env_ids] != version
        if self.sample_freq > 0:
            due |= self.steps[env_ids] >= self.sample_freq
        rows = env_ids[due]
        if len(rows):
            draws = self.rng.standard_normal((len(rows), *shape))
            self.matrices[rows] = (draws * sigma).astype(np.float32)
            self.steps[rows], self.drawn_at[rows] = 0, version
        self.steps[env_ids] += 1
        return np.einsum("bf,bfa->ba", np.asarray(features, np.float32), self.matrices[env_ids])

    def get_state(self, version: int) -> dict[str, np.ndarray]:
        """The matrices, counters and generator, as arrays (a checkpoint's policy state); ``version``:
        the weights' version now (a matrix drawn under it stays current after a restore)."""
        rng = np.frombuffer(json.dumps(self.rng.bit_generator.state).encode(), np.uint8)
        current = (self.drawn_at == version).astype(np.int8)
        return {"sde_matrices": self.matrices.copy(), "sde_steps": self.steps.copy(),
                "sde_current": current, "sde_rng": rng}  # fmt: skip

    def set_state(self, arrays: dict[str, np.ndarray], version: int) -> None:
        """Restore :meth:`get_state`'s arrays; the matrices current then are current under ``version``."""
        if "sde_matrices" not in arrays:
            return
        self.matrices = np.array(arrays["sde_matrices"], np.float32)
        self.steps = np.array(arrays["sde_steps"], np.int64)
        self.drawn_at = np.where(np.asarray(arrays["sde_current"]) == 1, version, -1).astype(np.int64)
        self.rng.bit_generator.state = json.loads(bytes(np.asarray(arrays["sde_rng"], np.uint8)).decode())


def check_sde_action_space(config: Any, action_space: Any) -> None:
    """Refuse ``training.use_sde`` on an env without Box actions, naming the key, before a policy is
    built. gSDE's noise is a Gaussian over continuous actions; the policies refuse it too (a
    ``TypeError`` for code that builds one directly), and this check turns that into the one-line
    config error ``rlgear train`` prints."""
    if getattr(config.training, "use_sde", False) and action_space.kind != "continuous":
        raise config.fail(
            "training.use_sde",
            f"gSDE needs Box actions, but env '{config.env.name}' has {action_space!r}: set it to false",
        )
