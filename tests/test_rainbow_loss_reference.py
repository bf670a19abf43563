"""DQN's Rainbow switches (C51, noisy nets) on both backends against an independent numpy reference.

The reference is written from the papers in float64, with its own code for every
piece: the factorised noisy layer ``y = x (mu_W + sigma_W * outer(f(e_in), f(e_out)))
+ mu_b + sigma_b * f(e_out)`` with ``f(x) = sign(x) sqrt(|x|)`` (Fortunato et al. 2018,
sec. 3.2), the dueling combination per atom (Hessel et al. 2018, sec. 3), and the C51
projection of Bellemare et al. 2017, Algorithm 1, as a loop over rows and atoms with
the floor/ceil split (the backends use the closed form ``sum_j clip(1 - |Tz_j - z_i| /
dz, 0, 1) p_j`` instead), its cross-entropy, double Q's selection by the online
network's expected Q, and prioritized replay's importance weights.

A noisy policy draws its noise inside ``learn_on_batch`` from ``noise_rng``: the
reference replays a copy of that generator in the documented order (online network's
layers ``hidden_0, hidden_1, ...`` then ``value, advantage`` or ``output``, each
``e_in`` then ``e_out``; then the target network's), so a wrong order, a wrong ``f`` or
a missing target noise shows.

Each case takes one plain-SGD step and compares the loss, the statistics, the per-row
priorities (the cross-entropy) and the update of every weight with ``lr x`` the
finite-difference gradient of the reference loss.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.plugins.algorithms.dqn import DQN
from rlgear.plugins.algorithms.dqn.rainbow import factorised_noise, scaled_noise
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    ACTIVATIONS,
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

STAT_RTOL, STAT_ATOL = 1e-4, 1e-5
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


# ----------------------------------------------------------------------------- the reference


def f(x):
    return np.where(x >= 0, 1.0, -1.0) * np.abs(x) ** 0.5


def layer_names(weights):
    hidden, i = [], 0
    while any(k.startswith(f"q/hidden_{i}/") for k in weights):
        hidden.append(f"q/hidden_{i}")
        i += 1
    heads = ["q/value", "q/advantage"] if any(k.startswith("q/value/") for k in weights) else ["q/output"]
    return hidden, heads


def draw_noise(rng, weights):
    """``{layer: (f(e_in), f(e_out))}`` drawn from ``rng`` in the documented order."""
    hidden, heads = layer_names(weights)
    noise = {}
    for name in hidden + heads:
        in_dim, out_dim = np.shape(weights[f"{name}/kernel_mu"])
        noise[name] = (f(rng.standard_normal(in_dim)), f(rng.standard_normal(out_dim)))
    return noise


def layer(weights, name, x, noise):
    w = {k: np.asarray(v, np.float64) for k, v in weights.items() if k.startswith(name + "/")}
    if f"{name}/kernel" in w:
        return x @ w[f"{name}/kernel"] + w[f"{name}/bias"]
    if noise is None:  # the mean weights
        return x @ w[f"{name}/kernel_mu"] + w[f"{name}/bias_mu"]
    e_in, e_out = noise[name]
    kernel = w[f"{name}/kernel_mu"] + w[f"{name}/kernel_sigma"] * np.outer(e_in, e_out)
    return x @ kernel + w[f"{name}/bias_mu"] + w[f"{name}/bias_sigma"] * e_out


def atom_logits(weights, obs, num_atoms, noise=None, activation="relu"):
    """``[B, actions, atoms]`` (``atoms`` 1: the Q-values), dueling per atom."""
    hidden, heads = layer_names(weights)
    x = np.asarray(obs, np.float64)
    for name in hidden:
        x = ACTIVATIONS[activation](layer(weights, name, x, noise))
    if heads == ["q/output"]:
        return layer(weights, "q/output", x, noise).reshape(len(x), -1, num_atoms)
    advantages = layer(weights, "q/advantage", x, noise).reshape(len(x), -1, num_atoms)
    values = layer(weights, "q/value", x, noise).reshape(len(x), 1, num_atoms)
    return values + advantages - advantages.mean(axis=1, keepdims=True)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def project(reward, discount, probs, support):
    """Bellemare et al. 2017, Algorithm 1, for one row: ``r + discount z_j`` clipped, split by floor/ceil."""
    v_min, v_max = support[0], support[-1]
    dz = (v_max - v_min) / (len(support) - 1)
    out = np.zeros(len(support))
    for z, p in zip(support, probs, strict=True):
        tz = min(max(reward + discount * z, v_min), v_max)
        b = (tz - v_min) / dz
        lower, upper = int(np.floor(b)), int(np.ceil(b))
        if lower == upper:
            out[lower] += p
        else:
            out[lower] += p * (upper - b)
            out[upper] += p * (b - lower)
    return out


def reference(weights, target_weights, batch, training, noise=None, target_noise=None):
    """``(loss, stats, per-row cross-entropy)`` of one minibatch of (n-step) rows under C51."""
    atoms = training.num_atoms
    support = np.linspace(training.v_min, training.v_max, atoms)
    n = len(batch[SB.OBS])
    log_probs = np.log(softmax(atom_logits(weights, batch[SB.OBS], atoms, noise)))
    taken = log_probs[np.arange(n), batch[SB.ACTIONS]]
    next_target = softmax(atom_logits(target_weights, batch[NEXT_OBS], atoms, target_noise))
    if training.double_q:
        chooser = softmax(atom_logits(weights, batch[NEXT_OBS], atoms, noise)) @ support
    else:
        chooser = next_target @ support
    chosen = chooser.argmax(axis=-1)
    target = np.stack(
        [
            project(
                float(batch[SB.REWARDS][i]), float(batch[SB.DISCOUNTS][i]), next_target[i, chosen[i]], support
            )
            for i in range(n)
        ]
    )
    cross_entropy = -(target * taken).sum(axis=-1)
    per_row = cross_entropy * batch.get(WEIGHTS, 1.0)
    loss = per_row.mean()
    stats = {
        "mean_q": (np.exp(taken) @ support).mean(),
        "mean_target_q": (target @ support).mean(),
        "mean_cross_entropy": cross_entropy.mean(),
        "total_loss": loss,
    }
    return loss, stats, cross_entropy


def huber(x, delta):
    return np.where(np.abs(x) <= delta, 0.5 * x**2, delta * (np.abs(x) - 0.5 * delta))


def scalar_reference(weights, target_weights, batch, training, noise=None, target_noise=None):
    """The plain (one Q-value per action) DQN loss of a noisy network: Huber of the TD error."""
    n = len(batch[SB.OBS])
    q = atom_logits(weights, batch[SB.OBS], 1, noise)[..., 0]
    q_taken = q[np.arange(n), batch[SB.ACTIONS]]
    next_target = atom_logits(target_weights, batch[NEXT_OBS], 1, target_noise)[..., 0]
    chosen = atom_logits(weights, batch[NEXT_OBS], 1, noise)[..., 0].argmax(axis=-1)
    targets = batch[SB.REWARDS] + batch[SB.DISCOUNTS] * next_target[np.arange(n), chosen]
    td = q_taken - targets
    loss = huber(td, training.huber_delta).mean()
    stats = {"mean_q": q_taken.mean(), "mean_target_q": targets.mean(), "mean_td_error": np.abs(td).mean()}
    return loss, {**stats, "total_loss": loss}, np.abs(td)


# ----------------------------------------------------------------------------- the hand-computed projection

SUPPORT = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
PROBS = np.array([0.1, 0.2, 0.3, 0.2, 0.2])
# (reward, discount, expected target distribution), worked out by hand on SUPPORT (dz = 1) from PROBS.
PROJECTION_CASES = {
    # terminated LAST: discount 0, no bootstrap: all mass at r = 0.5, half on 0 and half on 1
    "terminated": (0.5, 0.0, [0.0, 0.0, 0.5, 0.5, 0.0]),
    # truncated LAST (or a MID) one step on: bootstrap with gamma = 0.9. Tz = [-1.3, -0.4, 0.5, 1.4, 2.3 -> 2]:
    # -1.3 gives 0.03 to -2 and 0.07 to -1; -0.4: 0.08 to -1, 0.12 to 0; 0.5: 0.15 to 0 and 1;
    # 1.4: 0.12 to 1, 0.08 to 2; 2.3 is above v_max: all 0.2 to 2.
    "truncated": (0.5, 0.9, [0.03, 0.15, 0.27, 0.27, 0.28]),
    # every Tz = -3 + 0.5 z is at or below v_min = -2: everything on the lowest atom
    "below-v-min": (-3.0, 0.5, [1.0, 0.0, 0.0, 0.0, 0.0]),
    # terminated with a reward above v_max: everything on the highest atom
    "above-v-max": (2.5, 0.0, [0.0, 0.0, 0.0, 0.0, 1.0]),
    # Tz = 1 + z lands on atoms exactly (the floor == ceil case), the top one clipped: 3 -> 2
    "on-atoms": (1.0, 1.0, [0.0, 0.1, 0.2, 0.3, 0.4]),
}


def backend_projection(backend):
    if backend == "torch":
        import torch

        from rlgear.plugins.algorithms.dqn.torch_policy import project_onto_support

        def run(rewards, discounts, probs, support):
            args = [torch.tensor(np.asarray(a, np.float32)) for a in (rewards, discounts, probs, support)]
            return project_onto_support(*args).numpy()

        return run
    pytest.importorskip("tensorflow")
    from rlgear.plugins.algorithms.dqn.tf_policy import project_onto_support, tf

    def run(rewards, discounts, probs, support):
        args = [tf.constant(np.asarray(a, np.float32)) for a in (rewards, discounts, probs, support)]
        return project_onto_support(*args).numpy()

    return run


def test_the_reference_projection_gives_the_hand_computed_distributions():
    for name, (reward, discount, expected) in PROJECTION_CASES.items():
        np.testing.assert_allclose(
            project(reward, discount, PROBS, SUPPORT), expected, atol=1e-12, err_msg=name
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_projection_matches_the_hand_computed_example_on_both_backends(backend):
    """All rows in one batch: atoms outside [v_min, v_max], a terminated vs a truncated LAST."""
    names = sorted(PROJECTION_CASES)
    rewards = [PROJECTION_CASES[k][0] for k in names]
    discounts = [PROJECTION_CASES[k][1] for k in names]
    got = backend_projection(backend)(rewards, discounts, np.tile(PROBS, (len(names), 1)), SUPPORT)
    for row, name in enumerate(names):
        np.testing.assert_allclose(got[row], PROJECTION_CASES[name][2], atol=1e-6, err_msg=name)
    terminated, truncated = got[names.index("terminated")], got[names.index("truncated")]
    assert not np.allclose(terminated, truncated)  # the same reward; only the truncated row bootstraps


# ----------------------------------------------------------------------------- noise


def test_factorised_noise_transform_is_sign_times_square_root():
    np.testing.assert_allclose(scaled_noise(np.array([4.0, -0.25, 0.0, 2.0])), [2.0, -0.5, 0.0, np.sqrt(2)])


def test_factorised_noise_draws_in_then_out_from_the_generator():
    noise_in, noise_out = factorised_noise(np.random.default_rng(5), 3, 2)
    draws = np.random.default_rng(5).standard_normal(5)
    np.testing.assert_allclose(noise_in, f(draws[:3]), rtol=1e-6)
    np.testing.assert_allclose(noise_out, f(draws[3:]), rtol=1e-6)


# ----------------------------------------------------------------------------- building and stepping policies


def build(tmp_path, backend, training, model=None):
    base = {"optimizer": "sgd", "lr": 0.3, "grad_clip": None, "train_batch_size": N}
    config = resolve(
        tmp_path, "dqn", {**base, **training}, {"activation": "relu", **(model or {})}, backend=backend
    )
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    policy.set_weights(random_weights(policy.get_weights(), seed=1, gain=1.5))
    policy.set_target_weights(random_weights(policy.get_weights(), seed=2, gain=1.5))
    return policy


@pytest.mark.parametrize("backend", BACKENDS)
def test_noisy_layer_forward_with_given_noise_matches_the_reference(tmp_path, backend):
    policy = build(tmp_path, backend, {"noisy": True, "num_atoms": 3, "dueling": True})
    weights = policy.get_weights()
    rng = np.random.default_rng(9)
    noise = {}
    hidden, heads = layer_names(weights)
    for net_layer, name in zip(policy.model.noisy_layers(), hidden + heads, strict=True):
        noise[name] = (rng.normal(size=net_layer.in_dim), rng.normal(size=net_layer.out_dim))
        net_layer.set_noise(*(np.asarray(e, np.float32) for e in noise[name]))
    obs = rng.normal(size=(5, 4)).astype(np.float32)
    expected = atom_logits(weights, obs, 3, noise).reshape(5, -1)
    np.testing.assert_allclose(policy.action_distribution_inputs(obs), expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(expected, atom_logits(weights, obs, 3).reshape(5, -1))  # the noise matters


def check_step(policy, batch):
    training = policy.config.training
    weights, target = policy.get_weights(), policy.get_target_weights()
    noise = target_noise = None
    if training.noisy:  # what learn_on_batch will draw: online layers, then the target's
        rng = copy.deepcopy(policy.noise_rng)
        noise, target_noise = draw_noise(rng, weights), draw_noise(rng, target)
    ref = reference if training.num_atoms > 1 else scalar_reference

    def loss(w):
        return ref(w, target, batch, training, noise, target_noise)[0]

    _, expected, priorities = ref(weights, target, batch, training, noise, target_noise)
    grads = finite_difference_gradient(loss, weights)
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    np.testing.assert_allclose(policy.td_errors, priorities, rtol=1e-4, atol=1e-5, err_msg="priorities")
    assert_update_is_sgd_on(update, grads, training.lr)
    return expected


C51 = {"num_atoms": 5, "v_min": -3.0, "v_max": 3.0}
CASES = {
    # name: (training, batch kwargs)
    "c51-double-dueling": ({**C51, "double_q": True, "dueling": True}, {}),
    "c51-max-plain": ({**C51, "double_q": False, "dueling": False}, {}),
    "c51-double-plain": ({**C51, "double_q": True, "dueling": False}, {}),
    "c51-importance-weights": ({**C51, "double_q": True, "dueling": True}, {"weights": True}),
    "c51-noisy-double-dueling": ({**C51, "noisy": True, "sigma0": 2.0}, {"weights": True}),
    "noisy-without-c51": ({"noisy": True, "sigma0": 2.0, "huber_delta": 0.7}, {}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_rainbow_loss_stats_priorities_and_update_match_the_numpy_reference(tmp_path, backend, case):
    training, batch_kwargs = CASES[case]
    policy = build(tmp_path, backend, training)
    # rewards of scale 3 with the support [-3, 3]: some targets fall outside it and are clipped
    check_step(policy, transitions(**batch_kwargs, scale=3.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_c51_double_q_selects_by_the_online_networks_expected_q(tmp_path, backend):
    """The case's rows include some where the online and the target network prefer different actions."""
    policy = build(tmp_path, backend, {**C51, "double_q": True})
    support = np.linspace(-3, 3, 5)
    next_obs = transitions()[NEXT_OBS]
    online = (softmax(atom_logits(policy.get_weights(), next_obs, 5)) @ support).argmax(axis=-1)
    target = (softmax(atom_logits(policy.get_target_weights(), next_obs, 5)) @ support).argmax(axis=-1)
    assert (online != target).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_c51_n_step_rows_from_a_fragment_with_both_episode_ends(tmp_path, backend):
    """n-step rows (DQN's postprocessing) of a terminated and a truncated episode: the terminated
    windows do not bootstrap (discount 0), the truncated one does, and the loss matches."""
    policy = build(tmp_path, backend, {**C51, "n_step": 3, "gamma": 0.9})
    rows = DQN.postprocess(fragment_with_both_episode_ends(), policy, policy.config)
    assert (rows[SB.DISCOUNTS] == 0).any() and (rows[SB.DISCOUNTS] > 0).any()
    check_step(policy, SB({k: rows[k] for k in (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, NEXT_OBS)}))
