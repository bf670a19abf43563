"""QR-DQN's quantile Huber loss on both backends against an independent numpy reference, option by option.

The reference is written from Dabney et al. 2018 in float64: the Q-network with N outputs per
action (dueling per quantile, ``V_i + A_ai - mean_a A_ai``; noisy layers as Fortunato et al.
2018, from ``tests/test_rainbow_loss_reference.py``'s numpy network), the fractions
``tau_i = (2i + 1) / (2N)``, the target samples ``r + discount * theta'_j(s', a*)`` with ``a*``
greedy on the mean of the quantiles (the online network's with double Q, else the target's;
over the allowed actions of ``next_obs`` when there is a mask), and the loss of eq. 10 written as
a loop over the pairs ``(i, j)``::

    rho_tau(u) = |tau - 1{u < 0}| L_kappa(u) / kappa   (kappa 0: |tau - 1{u < 0}| |u|)
    row loss   = sum_i mean_j rho_tau_i(T theta_j - theta_i)
    loss       = mean_rows(importance weight x row loss)

Each case takes one plain-SGD step and compares the loss, the statistics, the per-row priorities
(the row loss before the importance weight) and the update of every weight with ``lr x`` the
finite-difference gradient of the reference loss. The loss function itself is also checked on a
hand-worked two-quantile example.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.plugins.algorithms.dqn.qrdqn import QRDQN
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    assert_update_is_sgd_on,
    finite_difference_gradient,
    global_norm,
    make_policy,
    random_weights,
    resolve,
    sgd_step,
)
from tests.test_dqn_loss_reference import N, fragment_with_both_episode_ends, transitions
from tests.test_rainbow_loss_reference import atom_logits, draw_noise

STAT_RTOL, STAT_ATOL = 1e-4, 1e-5
QUANTILES = 5
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


# ----------------------------------------------------------------------------- the reference


def huber(u, kappa):
    return 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)


def rho(u, tau, kappa):
    """The quantile Huber loss of one difference ``u = target - estimate`` at fraction ``tau`` (eq. 10)."""
    weight = abs(tau - (1.0 if u < 0 else 0.0))
    return weight * (huber(u, kappa) / kappa if kappa > 0 else abs(u))


def loss_and_gradient_with_taus(estimates, targets, taus, kappa):
    """The pairwise reference with any taus, and its gradient in each estimate: ``d/d theta_i =
    -mean_j |tau_i - 1{u_ij < 0}| clamp(u_ij, -kappa, kappa) / kappa`` (kappa 0: ``sign(u_ij)``)."""
    loss, gradient = 0.0, np.zeros(len(estimates))
    for i, (estimate, tau) in enumerate(zip(estimates, taus, strict=True)):
        for target in targets:
            u = float(target) - float(estimate)
            loss += rho(u, tau, kappa) / len(targets)
            slope = np.clip(u, -kappa, kappa) / kappa if kappa > 0 else np.sign(u)
            gradient[i] -= abs(tau - (1.0 if u < 0 else 0.0)) * slope / len(targets)
    return loss, gradient


def row_loss(estimates, targets, kappa):
    """``sum_i mean_j rho_tau_i(targets_j - estimates_i)`` for one row at QR-DQN's fractions
    ``tau_i = (2i + 1) / (2N)``."""
    n = len(estimates)
    taus = [(2 * i + 1) / (2 * n) for i in range(n)]
    loss, _ = loss_and_gradient_with_taus(estimates, targets, taus, kappa)
    return loss


def reference(weights, target_weights, batch, training, noise=None, target_noise=None):
    """``(loss, stats, per-row loss)`` of one minibatch of (n-step) rows."""
    n_q = training.num_quantiles
    rows = len(batch[SB.OBS])
    quantiles = atom_logits(weights, batch[SB.OBS], n_q, noise)  # [B, actions, N]
    taken = quantiles[np.arange(rows), batch[SB.ACTIONS]]
    next_target = atom_logits(target_weights, batch[NEXT_OBS], n_q, target_noise)
    if training.double_q:
        chooser = atom_logits(weights, batch[NEXT_OBS], n_q, noise).mean(axis=-1)
    else:
        chooser = next_target.mean(axis=-1)
    if SB.NEXT_ACTION_MASK in batch:
        chooser = np.where(batch[SB.NEXT_ACTION_MASK], chooser, -np.inf)
    chosen = chooser.argmax(axis=-1)
    rewards = batch[SB.REWARDS].astype(np.float64)
    discounts = batch[SB.DISCOUNTS].astype(np.float64)
    targets = rewards[:, None] + discounts[:, None] * next_target[np.arange(rows), chosen]
    losses = np.array([row_loss(taken[b], targets[b], training.kappa) for b in range(rows)])
    loss = (losses * batch.get(WEIGHTS, 1.0)).mean()
    stats = {
        "mean_q": taken.mean(),
        "mean_target_q": targets.mean(),
        "mean_quantile_loss": losses.mean(),
        "total_loss": loss,
    }
    return loss, stats, losses


# ----------------------------------------------------------------------------- the hand-worked loss

# Two quantiles (tau 1/4 and 3/4) at estimates [0, 1], two target samples [0.5, 3]:
#   i = 0 (tau 1/4): u = 0.5, 3 (both >= 0, weight 1/4);
#   i = 1 (tau 3/4): u = -0.5 (weight |3/4 - 1| = 1/4), 2 (weight 3/4).
# kappa 1: L(0.5) = 0.125, L(3) = 2.5, L(-0.5) = 0.125, L(2) = 1.5
#   -> (1/4 (0.125 + 2.5)) / 2 + (1/4 0.125 + 3/4 1.5) / 2 = 0.328125 + 0.578125 = 0.90625
# kappa 0: |u| -> (1/4 (0.5 + 3)) / 2 + (1/4 0.5 + 3/4 2) / 2 = 0.4375 + 0.8125 = 1.25
# kappa 2: L_2(u) / 2 = 0.0625, 2, 0.0625, 1 -> (1/4 2.0625) / 2 + (1/4 0.0625 + 3/4) / 2 = 0.640625
HAND = {1.0: 0.90625, 0.0: 1.25, 2.0: 0.640625}
ESTIMATES, TARGETS = [0.0, 1.0], [0.5, 3.0]


@pytest.mark.parametrize("kappa", sorted(HAND))
def test_the_reference_loss_gives_the_hand_worked_values(kappa):
    assert row_loss(ESTIMATES, TARGETS, kappa) == pytest.approx(HAND[kappa], abs=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kappa", sorted(HAND))
def test_backend_quantile_huber_loss_gives_the_hand_worked_values(backend, kappa):
    from rlgear.plugins.algorithms.dqn.qrdqn_config import quantile_midpoints

    np.testing.assert_allclose(quantile_midpoints(2), [0.25, 0.75])
    got, _ = backend_quantile_loss_and_gradient(backend)(
        [ESTIMATES, TARGETS], [TARGETS, ESTIMATES], quantile_midpoints(2), kappa
    )
    # the second row swaps estimates and targets: not the same loss (the loss is asymmetric in u)
    assert got[0] == pytest.approx(HAND[kappa], abs=1e-6)
    assert got[1] == pytest.approx(row_loss(TARGETS, ESTIMATES, kappa), abs=1e-6)
    assert got[1] != pytest.approx(got[0], abs=1e-3)


def backend_quantile_loss_and_gradient(backend):
    """``run(estimates, targets, taus, kappa) -> (row losses, d sum(row losses) / d estimates)``."""
    if backend == "torch":
        import torch

        from rlgear.plugins.backends.torch.losses import quantile_huber_loss

        def run(estimates, targets, taus, kappa):
            estimates = torch.tensor(np.asarray(estimates, np.float32), requires_grad=True)
            args = [torch.tensor(np.asarray(a, np.float32)) for a in (targets, taus)]
            rows = quantile_huber_loss(estimates, *args, kappa)
            rows.sum().backward()
            return rows.detach().numpy(), estimates.grad.numpy()

        return run
    pytest.importorskip("tensorflow")
    from rlgear.plugins.backends.tf import tf
    from rlgear.plugins.backends.tf.losses import quantile_huber_loss

    def run(estimates, targets, taus, kappa):
        estimates = tf.constant(np.asarray(estimates, np.float32))
        args = [tf.constant(np.asarray(a, np.float32)) for a in (targets, taus)]
        with tf.GradientTape() as tape:
            tape.watch(estimates)
            rows = quantile_huber_loss(estimates, *args, kappa)
            total = tf.reduce_sum(rows)
        return rows.numpy(), tape.gradient(total, estimates).numpy()

    return run


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kappa", sorted(HAND))
@pytest.mark.parametrize("per_row_taus", [False, True], ids=["midpoints", "per-row-taus"])
def test_backend_quantile_huber_loss_and_gradient_match_the_pairwise_reference(backend, kappa, per_row_taus):
    """Both backends compute the loss from sorted targets (not pairwise), so the cases that a
    sort and a binary search can get wrong are here: targets tied with each other, with an estimate
    and at exactly ``u = +-kappa``; estimates beyond every target on either side; returns near 1000
    (precision of the sums of squares); more targets than estimates; QR-DQN's shared midpoints and
    IQN's per-row taus."""
    rng = np.random.default_rng(7)
    rows, n, m = 6, 5, 8
    targets = np.round(rng.normal(size=(rows, m)) * 8) / 4  # quarters: ties, exact in float32
    targets[:, 3] = targets[:, 1]
    estimates = np.round(rng.normal(size=(rows, n)) * 8) / 4
    estimates[0, 0] = targets[0, 2]  # u == 0
    estimates[1, 1] = targets[1, 4] - kappa  # u == +kappa
    estimates[2, 2] = targets[2, 5] + kappa  # u == -kappa
    estimates[3, 0], estimates[3, 4] = targets[3].min() - 5.0, targets[3].max() + 5.0
    targets[4] += 1000.0
    estimates[4] += 1000.0
    targets[5, :] = 0.5  # every target the same
    taus = (
        rng.uniform(size=(rows, n))
        if per_row_taus
        else np.broadcast_to((2 * np.arange(n) + 1) / (2 * n), (rows, n))
    )
    # the reference sees the float32 values the backends see (the taus are not quarters)
    estimates, targets, taus = (
        np.asarray(a, np.float32).astype(np.float64) for a in (estimates, targets, taus)
    )
    got_rows, got_gradient = backend_quantile_loss_and_gradient(backend)(
        estimates, targets, taus if per_row_taus else taus[0], kappa
    )
    for row in range(rows):
        loss, gradient = loss_and_gradient_with_taus(estimates[row], targets[row], taus[row], kappa)
        assert got_rows[row] == pytest.approx(loss, rel=1e-5, abs=1e-5), row
        np.testing.assert_allclose(got_gradient[row], gradient, rtol=1e-5, atol=1e-6, err_msg=f"row {row}")


def test_the_quantile_loss_is_minimised_at_the_target_distributions_quantiles():
    """Quantile regression's defining property (Dabney et al. 2018, Lemma 2 with kappa 0): over many
    target samples, the loss is smallest when estimate i is the tau_i-quantile of the samples."""
    samples = np.random.default_rng(0).exponential(size=401)
    best = np.quantile(samples, [0.25, 0.75], method="inverted_cdf")
    at_best = row_loss(best, samples, 0.0)
    for shift in (-0.05, 0.05):
        for i in range(2):
            moved = best.copy()
            moved[i] += shift
            assert row_loss(moved, samples, 0.0) > at_best


# ----------------------------------------------------------------------------- one step on each backend


def build(tmp_path, backend, training, model=None):
    base = {"optimizer": "sgd", "lr": 0.3, "grad_clip": None, "train_batch_size": N}
    config = resolve(
        tmp_path,
        "qrdqn",
        {"num_quantiles": QUANTILES, **base, **training},
        {"activation": "relu", **(model or {})},
        backend=backend,
    )
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    policy.set_weights(random_weights(policy.get_weights(), seed=1, gain=1.5))
    # A target network that differs from the online one (so double Q and plain max differ).
    policy.set_target_weights(random_weights(policy.get_weights(), seed=2, gain=1.5))
    return policy


def check_step(policy, batch):
    training = policy.config.training
    weights, target = policy.get_weights(), policy.get_target_weights()
    noise = target_noise = None
    if training.noisy:  # what learn_on_batch will draw: online layers, then the target's
        rng = copy.deepcopy(policy.noise_rng)
        noise, target_noise = draw_noise(rng, weights), draw_noise(rng, target)

    def loss(w):
        return reference(w, target, batch, training, noise, target_noise)[0]

    _, expected, priorities = reference(weights, target, batch, training, noise, target_noise)
    grads = finite_difference_gradient(loss, weights)
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    np.testing.assert_allclose(policy.td_errors, priorities, rtol=1e-4, atol=1e-5, err_msg="priorities")
    assert_update_is_sgd_on(update, grads, training.lr)
    return expected


def with_next_action_mask(batch):
    """Every third row's next_obs allows action 1 only (the argmax over allowed actions)."""
    mask = np.ones((len(batch), 2), dtype=bool)
    mask[::3, 0] = False
    return SB({**batch, SB.NEXT_ACTION_MASK: mask})


CASES = {
    # name: (training, batch kwargs)
    "double-dueling": ({"double_q": True, "dueling": True}, {}),
    "max-plain": ({"double_q": False, "dueling": False}, {}),
    "double-plain": ({"double_q": True, "dueling": False}, {}),
    "max-dueling": ({"double_q": False, "dueling": True}, {}),
    "importance-weights": ({"double_q": True, "dueling": True}, {"weights": True}),
    "kappa-0": ({"kappa": 0.0}, {}),
    "kappa-2": ({"kappa": 2.0, "double_q": False}, {}),
    "noisy-double-dueling": ({"noisy": True, "sigma0": 2.0}, {"weights": True}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_qrdqn_loss_stats_priorities_and_update_match_the_numpy_reference(tmp_path, backend, case):
    training, batch_kwargs = CASES[case]
    policy = build(tmp_path, backend, training)
    # rewards of scale 3: differences on both sides of kappa
    check_step(policy, transitions(**batch_kwargs, scale=3.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_next_action_mask_restricts_the_greedy_next_action(tmp_path, backend):
    """Rows whose next_obs allows one action bootstrap from that action even where the other has the
    larger mean; the case has such rows (else the mask would change nothing)."""
    policy = build(tmp_path, backend, {"double_q": False})
    batch = with_next_action_mask(transitions(scale=3.0))
    means = atom_logits(policy.get_target_weights(), batch[NEXT_OBS], QUANTILES).mean(axis=-1)
    assert (means[::3].argmax(axis=-1) == 0).any()
    check_step(policy, batch)


@pytest.mark.parametrize("backend", BACKENDS)
def test_terminal_rows_target_the_reward_alone(tmp_path, backend):
    """With every discount 0 (terminated) each row's target samples all equal its reward."""
    policy = build(tmp_path, backend, {})
    batch = transitions(scale=3.0)
    batch[SB.DISCOUNTS] = np.zeros(N, np.float32)
    expected = check_step(policy, batch)
    assert expected["mean_target_q"] == pytest.approx(batch[SB.REWARDS].mean(), rel=1e-6)


def test_double_q_case_has_rows_where_online_and_target_networks_disagree(tmp_path):
    policy = build(tmp_path, "torch", {"double_q": True})
    next_obs = transitions()[NEXT_OBS]
    online = atom_logits(policy.get_weights(), next_obs, QUANTILES).mean(axis=-1).argmax(axis=-1)
    target = atom_logits(policy.get_target_weights(), next_obs, QUANTILES).mean(axis=-1).argmax(axis=-1)
    assert (online != target).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_importance_weights_scale_each_rows_loss_but_not_its_priority(tmp_path, backend):
    weighted = transitions(weights=True, scale=3.0)
    plain = SB({k: v for k, v in weighted.items() if k != WEIGHTS})
    results = {}
    for name, batch in (("weighted", weighted), ("plain", plain)):
        policy = build(tmp_path / name, backend, {})
        expected = check_step(policy, batch)
        results[name] = (expected["total_loss"], policy.td_errors.copy())
    assert results["weighted"][0] < 0.9 * results["plain"][0]  # weights in [0.1, 1] shrink the loss
    np.testing.assert_allclose(results["weighted"][1], results["plain"][1], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_step", [1, 3])
def test_n_step_rows_from_a_fragment_with_both_episode_ends(tmp_path, backend, n_step):
    """n-step rows (DQN's postprocessing) of a terminated and a truncated episode: the terminated
    windows do not bootstrap (discount 0), the others do with gamma**k, and the loss matches."""
    gamma = 0.9
    policy = build(tmp_path, backend, {"n_step": n_step, "gamma": gamma})
    rows = QRDQN.postprocess(fragment_with_both_episode_ends(), policy, policy.config)
    assert (rows[SB.DISCOUNTS] == 0).any() and (rows[SB.DISCOUNTS] > 0).any()
    if n_step == 3:  # some windows are 3 steps long: discount gamma**3
        assert np.isclose(rows[SB.DISCOUNTS], gamma**3).any()
    check_step(policy, SB({k: rows[k] for k in (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, NEXT_OBS)}))
