"""TQC's losses against an independent float64 numpy reference, option by option, on both backends.

Written from Kuznetsov et al. 2020 (eqs. 10-13) with sb3-contrib's reductions, from the
framework-neutral weights: K stacked critics ``q/...`` each output N atoms at ``[obs, action in
[-1, 1]]``; SAC's actor ``policy/...`` and ``log_alpha``::

    y     = r + discount (the K(N - d) smallest of all K N target atoms at (s', a') - alpha log pi(a'|s'))
    rho   = |tau_i - 1[u < 0]| huber(u),  u = y_j - Z_k(s, a)_i,  tau_i = (i + 1/2) / N,
            huber(u) = u^2 / 2 where |u| <= 1, else |u| - 1/2
    critic loss = mean over rows (times the importance weight), critics, atoms i and kept atoms j of rho
    actor loss  = mean(alpha log pi(a|s) - mean_{k, i} Z_k(s, a)_i)   (critics fixed)
    alpha loss  = -mean(log alpha (log pi(a|s) + target entropy))  (SAC's)

Each case takes one plain-SGD step and compares every statistic, the per-row ``|TD error|``
(``|mean_i Z_k - mean_j y_j|`` averaged over the critics) and the update of every weight with
``lr x`` the finite-difference gradient of its loss (``check_step``), then the Polyak update.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import dense, mlp_body
from tests.test_offpolicy_loss_reference import build, check_step, scaled, squashed_gaussian, transitions


def critic_atoms(weights, obs, actions):
    """``[K, B, N]``: each stacked critic on ``[obs, actions]``, one member at a time."""
    x = np.concatenate([np.asarray(obs, np.float64), np.asarray(actions, np.float64)], axis=-1)
    out = []
    for k in range(np.shape(weights["q/output/kernel"])[0]):
        member = {name: np.asarray(value)[k] for name, value in weights.items() if name.startswith("q/")}
        out.append(dense(member, "q/output", mlp_body(member, "q", x, "relu")))
    return np.stack(out)


def quantile_huber(u, tau):
    """rho_tau(u) of every pair: ``u`` ``[K, B, N, M]``, ``tau`` ``[N]`` (the atoms' levels)."""
    huber = np.where(np.abs(u) <= 1.0, 0.5 * u**2, np.abs(u) - 0.5)
    return np.abs(tau[None, None, :, None] - (u < 0)) * huber


def tqc_targets(weights, target, batch, training, next_noise, alpha):
    """``[B, M]``: the kept target atoms, written as a loop over the rows."""
    next_actions, next_logp = squashed_gaussian(weights, batch[NEXT_OBS], next_noise)
    next_atoms = critic_atoms(target, batch[NEXT_OBS], next_actions)  # [K, B, N]
    k, rows, n = next_atoms.shape
    kept = k * (n - training.top_quantiles_to_drop_per_net)
    out = []
    for b in range(rows):
        pooled = sorted(next_atoms[:, b, :].ravel().tolist())[:kept]
        soft = np.array(pooled) - alpha * next_logp[b]
        out.append(batch[SB.REWARDS][b] + batch[SB.DISCOUNTS][b] * soft)
    return np.array(out)


def tqc_reference(weights, target, batch, training, noise, next_noise):
    log_alpha = float(np.asarray(weights["log_alpha"], np.float64)[0])
    alpha = np.exp(log_alpha)
    target_entropy = -np.shape(noise)[1] if training.target_entropy is None else training.target_entropy
    targets = tqc_targets(weights, target, batch, training, next_noise, alpha)
    atoms = critic_atoms(weights, batch[SB.OBS], scaled(batch[SB.ACTIONS]))
    n = atoms.shape[2]
    tau = (np.arange(n) + 0.5) / n
    rho = quantile_huber(targets[None, :, None, :] - atoms[..., None], tau)
    per_row = rho.mean(axis=(0, 2, 3))
    if WEIGHTS in batch:
        per_row = per_row * batch[WEIGHTS]
    critic_loss = per_row.mean()
    td = np.abs(atoms.mean(axis=2) - targets.mean(axis=1)[None]).mean(axis=0)
    actions, logp = squashed_gaussian(weights, batch[SB.OBS], noise)
    actor_loss = (alpha * logp - critic_atoms(weights, batch[SB.OBS], actions).mean(axis=(0, 2))).mean()
    alpha_loss = -(log_alpha * (logp + target_entropy)).mean()
    losses = {"q/": critic_loss, "policy/": actor_loss}
    if training.tune_alpha:
        losses["log_alpha"] = alpha_loss
    stats = {
        "critic_loss": critic_loss,
        "actor_loss": actor_loss,
        "alpha_loss": alpha_loss,
        "alpha": alpha,
        "entropy": -logp.mean(),
        "mean_q": atoms.mean(),
        "mean_target_q": targets.mean(),
        "mean_td_error": td.mean(),
        "total_loss": sum(losses.values()),
    }
    return losses, stats, td


def n_step_transitions(seed=0):
    """Rows of 1- to 3-step windows (discount gamma**k), some cut by a terminal (discount 0)."""
    batch = transitions(seed)
    rng = np.random.default_rng(seed + 10)
    steps = rng.integers(1, 4, size=len(batch))
    batch[SB.DISCOUNTS] = (0.95**steps * (rng.random(len(batch)) > 0.2)).astype(np.float32)
    return batch


TQC_CASES = {
    # name: (training, batch options)
    "three-critics-five-atoms-drop-two": ({"n_critics": 3, "n_quantiles": 5}, {}),
    "one-critic-nothing-dropped": (
        {"n_critics": 1, "n_quantiles": 4, "top_quantiles_to_drop_per_net": 0},
        {},
    ),
    "two-critics-keep-two-of-twelve": (
        {"n_critics": 2, "n_quantiles": 6, "top_quantiles_to_drop_per_net": 5},
        {},
    ),
    "fixed-alpha": ({"n_critics": 2, "n_quantiles": 3, "tune_alpha": False, "initial_alpha": 0.3}, {}),
    "importance-weights": ({"n_critics": 2, "n_quantiles": 4, "prioritized_replay": True}, {}),
    "n-step-discounts": ({"n_critics": 2, "n_quantiles": 4, "n_step": 3}, {"n_step": True}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(TQC_CASES))
def test_tqc_losses_td_errors_and_update_match_the_numpy_reference(tmp_path, case, backend):
    training, options = TQC_CASES[case]
    policy = build(tmp_path, "tqc", {"tau": 0.1, **training}, backend=backend)
    config = policy.config.training
    if options.get("n_step"):
        batch = n_step_transitions()
    else:
        batch = transitions(weights=config.prioritized_replay, actions_at_bounds=True)
    assert (batch[SB.DISCOUNTS] == 0).any()  # terminal rows: no bootstrap

    def reference(weights, target):
        noise, next_noise = (t.numpy() for t in policy.last_noise)
        return tqc_reference(weights, target, batch, config, noise, next_noise)

    weights, target = policy.get_weights(), policy.get_target_weights()
    assert weights["q/output/kernel"].shape == (config.n_critics, 6, config.n_quantiles)
    log_alpha = weights["log_alpha"].copy()
    check_step(policy, batch, reference, tau=0.1)
    # Both branches of the Huber loss were exercised (|u| below and above kappa = 1).
    next_noise = policy.last_noise[1].numpy()
    alpha = float(np.exp(weights["log_alpha"][0]))
    targets = tqc_targets(weights, target, batch, config, next_noise, alpha)
    assert targets.shape == (len(batch), config.kept_atoms())
    u = np.abs(
        targets[None, :, None, :] - critic_atoms(weights, batch[SB.OBS], scaled(batch[SB.ACTIONS]))[..., None]
    )
    assert 0.02 < (u <= 1.0).mean() < 0.98
    assert (policy.get_weights()["log_alpha"] == log_alpha).all() == (not config.tune_alpha)


def test_the_reference_drops_the_largest_atoms_of_the_pooled_critics(monkeypatch):
    """Two critics of three atoms, one dropped per critic: the target keeps the 4 smallest of 6."""
    import tests.test_tqc_loss_reference as module

    class Training:
        top_quantiles_to_drop_per_net = 1

    next_atoms = np.array([[[5.0, 1.0, 3.0]], [[0.0, 6.0, 2.0]]])  # [K=2, B=1, N=3]
    monkeypatch.setattr(module, "critic_atoms", lambda *_: next_atoms)
    monkeypatch.setattr(module, "squashed_gaussian", lambda *_: (np.zeros((1, 1)), np.array([0.0])))
    batch = {NEXT_OBS: np.zeros((1, 3)), SB.REWARDS: np.array([1.0]), SB.DISCOUNTS: np.array([0.5])}
    targets = tqc_targets(None, None, batch, Training, None, 0.2)
    np.testing.assert_allclose(targets, [[1.0, 1.5, 2.0, 2.5]])  # 1 + 0.5 x (0, 1, 2, 3)
