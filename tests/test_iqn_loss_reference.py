"""IQN's network and loss on both backends against an independent float64 numpy reference.

The reference is written from Dabney et al. 2018b: the trunk ``psi`` (``q/hidden_0 .. hidden_{k-2}``),
the cosine embedding ``phi(tau)_j = ReLU(sum_{i=0}^{n-1} cos(pi i tau) w_ij + b_j)``
(``q/tau_embedding``), the Hadamard product, the head's hidden layer (``q/hidden_{k-1}``) and the
output (or, dueling, ``V + A - mean_a A`` per tau); the next action greedy on the mean over K taus
(the online network's with double Q, else the target's); and the loss, a loop over the pairs
``(i, j)`` of online and target taus::

    rho_tau(u) = |tau - 1{u < 0}| L_kappa(u) / kappa
    row loss   = sum_i mean_j rho_{tau_i}(r + discount Z'_{tau'_j}(s', a*) - Z_{tau_i}(s, a))
    loss       = mean_rows(importance weight x row loss)

The taus are fixed arrays: a test copies the policy's tau generator and draws what the learning step
will draw, in the documented order (online ``[B, N]``, target ``[B, N']``, next-action ``[B, K]``),
and feeds those to the reference. Each case takes one plain-SGD step and compares the loss, the
statistics, the per-row priorities and the update of every weight with ``lr x`` the
finite-difference gradient of the reference loss.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.plugins.algorithms.dqn.iqn import IQN
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    ACTIVATIONS,
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    assert_update_is_sgd_on,
    dense,
    finite_difference_gradient,
    global_norm,
    make_policy,
    random_weights,
    resolve,
    sgd_step,
)
from tests.test_dqn_loss_reference import N, fragment_with_both_episode_ends, transitions

STAT_RTOL, STAT_ATOL = 1e-4, 1e-5
SAMPLES = {"num_tau_samples": 4, "num_tau_prime_samples": 5, "num_quantile_samples": 3, "num_cosines": 6}
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


# ----------------------------------------------------------------------------- the reference


def cosine_embedding(weights, taus):
    """``phi(tau)`` ``[B, M, d]`` for taus ``[B, M]``: ReLU of the n cosines cos(pi i tau), i = 0..n-1."""
    n = np.shape(weights["q/tau_embedding/kernel"])[0]
    cosines = np.cos(np.pi * np.arange(n)[None, None, :] * np.asarray(taus, np.float64)[..., None])
    return np.maximum(dense(weights, "q/tau_embedding", cosines), 0.0)


def z_values(weights, obs, taus, activation="relu"):
    """``[B, M, actions]``: ``Z_tau(s, a)`` at each row's taus."""
    act = ACTIVATIONS[activation]
    layers = 0
    while f"q/hidden_{layers}/kernel" in weights:
        layers += 1
    x = np.asarray(obs, np.float64)
    for i in range(layers - 1):  # the trunk psi
        x = act(dense(weights, f"q/hidden_{i}", x))
    hidden = act(dense(weights, f"q/hidden_{layers - 1}", x[:, None, :] * cosine_embedding(weights, taus)))
    if "q/output/kernel" in weights:
        return dense(weights, "q/output", hidden)
    advantages = dense(weights, "q/advantage", hidden)
    return dense(weights, "q/value", hidden) + advantages - advantages.mean(axis=-1, keepdims=True)


def huber(u, kappa):
    return np.where(np.abs(u) <= kappa, 0.5 * u * u, kappa * (np.abs(u) - 0.5 * kappa))


def rho(u, tau, kappa):
    """The quantile Huber loss of ``u = target - estimate`` at fraction ``tau`` (per row)."""
    return np.abs(tau - (u < 0)) * (huber(u, kappa) / kappa if kappa > 0 else np.abs(u))


def draw_taus(rng, rows, training):
    """What a learning step draws from the policy's ``tau_rng``, in the documented order."""
    widths = (training.num_tau_samples, training.num_tau_prime_samples, training.num_quantile_samples)
    return [rng.random((rows, width)).astype(np.float32) for width in widths]


def reference(weights, target_weights, batch, training, taus, target_taus, next_taus):
    """``(loss, stats, per-row loss)`` of one minibatch of (n-step) rows at the given taus."""
    rows = np.arange(len(batch[SB.OBS]))
    taken = z_values(weights, batch[SB.OBS], taus)[rows, :, batch[SB.ACTIONS]]  # [B, N]
    chooser_weights = weights if training.double_q else target_weights
    chooser = z_values(chooser_weights, batch[NEXT_OBS], next_taus).mean(axis=1)
    if SB.NEXT_ACTION_MASK in batch:
        chooser = np.where(batch[SB.NEXT_ACTION_MASK], chooser, -np.inf)
    chosen = chooser.argmax(axis=-1)
    next_z = z_values(target_weights, batch[NEXT_OBS], target_taus)[rows, :, chosen]  # [B, N']
    rewards = batch[SB.REWARDS].astype(np.float64)[:, None]
    targets = rewards + batch[SB.DISCOUNTS].astype(np.float64)[:, None] * next_z
    losses = np.zeros(len(rows))
    for i in range(taken.shape[1]):
        for j in range(targets.shape[1]):
            losses += rho(targets[:, j] - taken[:, i], taus[:, i].astype(np.float64), training.kappa)
    losses /= targets.shape[1]
    loss = (losses * batch.get(WEIGHTS, 1.0)).mean()
    stats = {
        "mean_q": taken.mean(),
        "mean_target_q": targets.mean(),
        "mean_quantile_loss": losses.mean(),
        "total_loss": loss,
    }
    return loss, stats, losses


# ----------------------------------------------------------------------------- one step on each backend


def build(tmp_path, backend, training, model=None):
    base = {"optimizer": "sgd", "lr": 0.3, "grad_clip": None, "train_batch_size": N, **SAMPLES}
    config = resolve(
        tmp_path, "iqn", {**base, **training}, {"activation": "relu", **(model or {})}, backend=backend
    )
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    policy.set_weights(random_weights(policy.get_weights(), seed=1, gain=1.5))
    # A target network that differs from the online one (so double Q and plain max differ).
    policy.set_target_weights(random_weights(policy.get_weights(), seed=2, gain=1.5))
    return policy


def check_step(policy, batch):
    training = policy.config.training
    weights, target = policy.get_weights(), policy.get_target_weights()
    taus = draw_taus(copy.deepcopy(policy.tau_rng), len(batch), training)

    def loss(w):
        return reference(w, target, batch, training, *taus)[0]

    _, expected, priorities = reference(weights, target, batch, training, *taus)
    grads = finite_difference_gradient(loss, weights)
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    np.testing.assert_allclose(policy.td_errors, priorities, rtol=1e-4, atol=1e-5, err_msg="priorities")
    assert_update_is_sgd_on(update, grads, training.lr)
    return expected


CASES = {
    # name: (training, batch kwargs)
    "double-dueling": ({"double_q": True, "dueling": True}, {}),
    "max-plain": ({"double_q": False, "dueling": False}, {}),
    "double-plain": ({"double_q": True, "dueling": False}, {}),
    "max-dueling": ({"double_q": False, "dueling": True}, {}),
    "importance-weights": ({"double_q": True, "dueling": True}, {"weights": True}),
    "kappa-2": ({"kappa": 2.0, "double_q": False}, {}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_iqn_loss_stats_priorities_and_update_match_the_numpy_reference(tmp_path, backend, case):
    training, batch_kwargs = CASES[case]
    policy = build(tmp_path, backend, training)
    check_step(policy, transitions(**batch_kwargs, scale=3.0))  # differences on both sides of kappa


@pytest.mark.parametrize("backend", BACKENDS)
def test_terminal_rows_target_the_reward_alone(tmp_path, backend):
    policy = build(tmp_path, backend, {})
    batch = transitions(scale=3.0)
    batch[SB.DISCOUNTS] = np.zeros(N, np.float32)
    expected = check_step(policy, batch)
    assert expected["mean_target_q"] == pytest.approx(batch[SB.REWARDS].mean(), rel=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_next_action_mask_restricts_the_greedy_next_action(tmp_path, backend):
    policy = build(tmp_path, backend, {"double_q": False})
    batch = transitions(scale=3.0)
    mask = np.ones((N, 2), dtype=bool)
    mask[::3, 0] = False
    batch = SB({**batch, SB.NEXT_ACTION_MASK: mask})
    check_step(policy, batch)


def test_double_q_case_has_rows_where_online_and_target_choices_disagree(tmp_path):
    policy = build(tmp_path, "torch", {"double_q": True})
    next_obs = transitions()[NEXT_OBS]
    *_, next_taus = draw_taus(copy.deepcopy(policy.tau_rng), N, policy.config.training)
    online = z_values(policy.get_weights(), next_obs, next_taus).mean(axis=1).argmax(axis=-1)
    target = z_values(policy.get_target_weights(), next_obs, next_taus).mean(axis=1).argmax(axis=-1)
    assert (online != target).any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_step", [1, 3])
def test_n_step_rows_from_a_fragment_with_both_episode_ends(tmp_path, backend, n_step):
    """n-step rows (DQN's postprocessing): terminated windows do not bootstrap, the others do with gamma**k."""
    gamma = 0.9
    policy = build(tmp_path, backend, {"n_step": n_step, "gamma": gamma})
    rows = IQN.postprocess(fragment_with_both_episode_ends(), policy, policy.config)
    assert (rows[SB.DISCOUNTS] == 0).any() and (rows[SB.DISCOUNTS] > 0).any()
    if n_step == 3:
        assert np.isclose(rows[SB.DISCOUNTS], gamma**3).any()
    check_step(policy, SB({k: rows[k] for k in (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, NEXT_OBS)}))


# ----------------------------------------------------------------------------- the network itself


def backend_arrays(backend, fn, *arrays):
    if backend == "torch":
        import torch

        with torch.no_grad():
            return fn(*[torch.from_numpy(np.asarray(a, np.float32)) for a in arrays]).numpy()
    from rlgear.plugins.backends.tf import tf

    return fn(*[tf.constant(np.asarray(a, np.float32)) for a in arrays]).numpy()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dueling", [False, True])
def test_cosine_embedding_and_quantile_values_match_the_reference(tmp_path, backend, dueling):
    policy = build(tmp_path, backend, {"dueling": dueling})
    weights = policy.get_weights()
    rng = np.random.default_rng(5)
    obs, taus = rng.normal(size=(7, 4)), rng.random((7, 9))
    taus[0, :2] = [0.0, 1.0]  # the ends of the interval
    embedded = backend_arrays(backend, policy.model.embed, taus)
    np.testing.assert_allclose(embedded, cosine_embedding(weights, taus), rtol=1e-5, atol=1e-5)
    got = backend_arrays(backend, policy.model.quantile_values, obs, taus)
    np.testing.assert_allclose(got, z_values(weights, obs, taus), rtol=1e-5, atol=1e-5)
    # the embedding of tau 0 is ReLU(sum_i w_ij + b_j): every cosine is 1
    np.testing.assert_allclose(
        embedded[0, 0], np.maximum(weights["q/tau_embedding/kernel"].sum(0) + weights["q/tau_embedding/bias"], 0),
        rtol=1e-5, atol=1e-5,
    )  # fmt: skip
