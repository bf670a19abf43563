"""Losses of recurrent (LSTM) policies on padded sequences, both backends, against an independent numpy reference.

Each case builds a batch of padded sequences (``max_seq_len`` rows each, a
``seq_mask``) whose padding rows carry garbage (large observations, advantages,
targets and states), and whose state-in columns hold garbage everywhere but at
each sequence's first row. The reference (``tests/numpy_reference.py``, float64)
runs the LSTM from each sequence's first state, keeps the real rows only and
applies the algorithm's loss as written for feed-forward batches. One plain-SGD
step on the batch must report the reference's statistics and move every weight
by ``lr x`` its finite-difference gradient; a loss that forgets the mask, or reads
the state of a row other than a sequence's first, gets other numbers.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    PENDULUM_ACT,
    PENDULUM_OBS,
    assert_update_is_sgd_on,
    finite_difference_gradient,
    global_norm,
    logp_and_entropy,
    lstm_actor_critic,
    make_policy,
    normalized,
    random_weights,
    resolve,
    sgd_step,
)

L, CELL = 4, 3
LENGTHS = [4, 2, 1, 3]  # real rows of each sequence; the rest is padding
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def build(tmp_path, algorithm, backend, continuous, training, model=None):
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    config = resolve(
        tmp_path, algorithm, {"optimizer": "sgd", "lr": 0.5, "grad_clip": None, **training},
        {"hidden_sizes": [4], "lstm": True, "lstm_cell_size": CELL, "max_seq_len": L, **(model or {})},
        env="Pendulum-v1" if continuous else "CartPole-v1", backend=backend,
    )  # fmt: skip
    policy = make_policy(config, backend, obs_space, act_space)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))
    return policy


def padded_batch(policy, continuous: bool, seed: int = 0) -> SB:
    rng = np.random.default_rng(seed)
    n = len(LENGTHS) * L
    mask = np.zeros(n, np.float32)
    for i, length in enumerate(LENGTHS):
        mask[i * L : i * L + length] = 1.0
    pad = mask == 0
    obs = rng.normal(size=(n, policy.observation_space.size)).astype(np.float32)
    obs[pad] = rng.normal(size=(int(pad.sum()), obs.shape[1])) * 30.0  # garbage
    if continuous:
        actions = rng.normal(size=(n, policy.action_space.size)).astype(np.float32)
    else:
        actions = rng.integers(policy.action_space.n, size=n).astype(np.int64)
    state_h = (rng.normal(size=(n, CELL)) * 5.0).astype(np.float32)  # garbage except at sequence starts ...
    state_c = (rng.normal(size=(n, CELL)) * 5.0).astype(np.float32)
    state_h[::L] = rng.normal(size=(len(LENGTHS), CELL)) * 0.5  # ... where it is the actor's state
    state_c[::L] = rng.normal(size=(len(LENGTHS), CELL)) * 0.5
    batch = SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: actions,
            SB.SEQ_MASK: mask,
            SB.state_in(0): state_h,
            SB.state_in(1): state_c,
            SB.ADVANTAGES: np.where(pad, 100.0, 0.7 + 2.0 * rng.normal(size=n)).astype(np.float32),
        }
    )
    dist_inputs, values = reference_outputs(policy.get_weights(), batch, policy.config.model.activation)
    logp, _ = logp_and_entropy(dist_inputs, actions, continuous)
    batch[SB.ACTION_LOGP] = np.where(pad, -50.0, logp + 0.25 * rng.normal(size=n)).astype(np.float32)
    batch[SB.VF_PREDS] = np.where(pad, 80.0, values + rng.uniform(-1.0, 1.0, size=n)).astype(np.float32)
    batch[SB.VALUE_TARGETS] = np.where(pad, -90.0, values + rng.normal(size=n)).astype(np.float32)
    return batch


def reference_outputs(weights, batch, activation):
    return lstm_actor_critic(
        weights, batch[SB.OBS], batch[SB.state_in(0)][::L], batch[SB.state_in(1)][::L], L, activation
    )


def real_rows(weights, batch, activation, continuous):
    """Per real row: log-probability, entropy, value, and the batch's columns."""
    dist_inputs, values = reference_outputs(weights, batch, activation)
    keep = batch[SB.SEQ_MASK] > 0
    logp, entropy = logp_and_entropy(dist_inputs[keep], batch[SB.ACTIONS][keep], continuous)
    columns = {key: np.asarray(value, np.float64)[keep] for key, value in batch.items() if key != SB.ACTIONS}
    return logp, entropy, values[keep], columns


def ppo_reference(weights, batch, training, continuous, activation):
    logp, entropy, values, rows = real_rows(weights, batch, activation, continuous)
    clip = training.clip_param
    log_ratio = logp - rows[SB.ACTION_LOGP]
    ratio = np.exp(log_ratio)
    advantages = rows[SB.ADVANTAGES]
    if training.normalize_advantages:
        advantages = normalized(advantages)
    policy_loss = -np.minimum(ratio * advantages, np.clip(ratio, 1 - clip, 1 + clip) * advantages).mean()
    vf_error = (values - rows[SB.VALUE_TARGETS]) ** 2
    if training.vf_clip_param is not None:
        old = rows[SB.VF_PREDS]
        clipped = old + np.clip(values - old, -training.vf_clip_param, training.vf_clip_param)
        vf_error = np.maximum(vf_error, (clipped - rows[SB.VALUE_TARGETS]) ** 2)
    vf_loss = 0.5 * vf_error.mean()
    loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy.mean()
    return loss, {
        "policy_loss": policy_loss,
        "vf_loss": vf_loss,
        "entropy": entropy.mean(),
        "approx_kl": ((ratio - 1) - log_ratio).mean(),
        "clip_fraction": (np.abs(ratio - 1) > clip).mean(),
        "total_loss": loss,
    }


def pg_reference(weights, batch, training, continuous, activation):
    logp, entropy, values, rows = real_rows(weights, batch, activation, continuous)
    advantages = rows[SB.ADVANTAGES]
    if training.normalize_advantages:
        advantages = normalized(advantages)
    policy_loss = -(logp * advantages).mean()
    loss = policy_loss - training.entropy_coeff * entropy.mean()
    stats = {"policy_loss": policy_loss, "entropy": entropy.mean()}
    if training.use_baseline:
        vf_loss = 0.5 * ((values - rows[SB.VALUE_TARGETS]) ** 2).mean()
        loss += training.vf_loss_coeff * vf_loss
        stats["vf_loss"] = vf_loss
    return loss, {**stats, "total_loss": loss}


def actor_critic_reference(weights, batch, training, continuous, activation):
    """A2C's and A3C's loss: advantages normalised only where the config has (and sets) the option."""
    logp, entropy, values, rows = real_rows(weights, batch, activation, continuous)
    advantages = rows[SB.ADVANTAGES]
    if getattr(training, "normalize_advantages", False):
        advantages = normalized(advantages)
    policy_loss = -(logp * advantages).mean()
    vf_loss = 0.5 * ((values - rows[SB.VALUE_TARGETS]) ** 2).mean()
    loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy.mean()
    return loss, {
        "policy_loss": policy_loss,
        "vf_loss": vf_loss,
        "entropy": entropy.mean(),
        "total_loss": loss,
    }


REFERENCES = {
    "ppo": ppo_reference,
    "pg": pg_reference,
    "a2c": actor_critic_reference,
    "a3c": actor_critic_reference,
}
CASES = {
    # name: (algorithm, continuous, training overrides)
    "ppo-discrete": ("ppo", False, {"sgd_minibatch_size": 16, "num_sgd_iter": 1, "entropy_coeff": 0.03}),
    "ppo-value-clip-raw-advantages": (
        "ppo", False, {"sgd_minibatch_size": 16, "num_sgd_iter": 1, "vf_clip_param": 0.4,
                       "normalize_advantages": False},
    ),
    "ppo-continuous": ("ppo", True, {"sgd_minibatch_size": 16, "num_sgd_iter": 1, "entropy_coeff": 0.03}),
    "pg-baseline": ("pg", False, {"entropy_coeff": 0.04}),
    "pg-no-baseline": ("pg", True, {"use_baseline": False, "normalize_advantages": False}),
    "a2c-normalised": ("a2c", False, {"normalize_advantages": True, "entropy_coeff": 0.04}),
    "a3c": ("a3c", False, {"entropy_coeff": 0.04, "vf_loss_coeff": 0.8}),
}  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_masked_sequence_loss_stats_and_update_match_the_numpy_reference(tmp_path, backend, case):
    algorithm, continuous, training_overrides = CASES[case]
    policy = build(tmp_path, algorithm, backend, continuous, training_overrides)
    training = policy.config.training
    activation = policy.config.model.activation
    batch = padded_batch(policy, continuous)
    weights = policy.get_weights()
    reference = REFERENCES[algorithm]
    _, expected = reference(weights, batch, training, continuous, activation)
    grads = finite_difference_gradient(
        lambda w: reference(w, batch, training, continuous, activation)[0], weights
    )
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    assert np.abs(grads["lstm/recurrent_kernel"]).max() > 1e-4  # the gradient runs through time
    assert_update_is_sgd_on(update, grads, training.lr)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a3c_worker_gradients_on_padded_sequences_are_the_reference_gradients(tmp_path, backend):
    policy = build(tmp_path, "a3c", backend, False, {"entropy_coeff": 0.04})
    training = policy.config.training
    batch = padded_batch(policy, False, seed=3)
    weights = policy.get_weights()
    grads, _ = policy.compute_gradients(batch)
    expected = finite_difference_gradient(
        lambda w: actor_critic_reference(w, batch, training, False, "tanh")[0], weights
    )
    assert set(grads) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(grads[name], value, rtol=2e-3, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ppo_minibatches_are_whole_sequences_in_the_policys_shuffled_order(tmp_path, backend):
    """``sgd_minibatch_size: 7`` rows rounds to 2 sequences of 4: one epoch is two SGD steps, each on
    two whole sequences in the order the policy's generator draws (seed 3), each equal to the reference's
    step on those sequences alone (advantages normalised over the minibatch's real rows)."""
    policy = build(tmp_path, "ppo", backend, False, {"sgd_minibatch_size": 7, "num_sgd_iter": 1})
    training = policy.config.training
    batch = padded_batch(policy, False, seed=4)
    order = np.random.default_rng(3).permutation(len(LENGTHS))  # the policy's minibatch generator
    weights = {k: v.astype(np.float64) for k, v in policy.get_weights().items()}
    for first in (0, 2):
        rows = (order[first : first + 2, None] * L + np.arange(L)).reshape(-1)
        minibatch = batch.select(rows)
        grads = finite_difference_gradient(
            lambda w, mb=minibatch: ppo_reference(w, mb, training, False, "tanh")[0], weights
        )
        weights = {k: v - training.lr * grads[k] for k, v in weights.items()}
    stats = policy.learn_on_batch(batch)
    assert stats["num_grad_updates"] == 2
    for name, value in policy.get_weights().items():
        np.testing.assert_allclose(value, weights[name], rtol=2e-3, atol=2e-5, err_msg=name)


# --- IMPALA: whole fragments [N, T+1], the state reset at FIRST rows inside -----------------------------------
def impala_batch(policy, seed: int = 0):
    from tests.test_vtrace import random_episodes

    rng = np.random.default_rng(seed)
    n, steps = 3, 7
    _, rewards, _, step_types, discounts = random_episodes(rng, T=steps, B=n, gamma=1.0)
    batch = SB(
        {
            SB.OBS: rng.normal(size=(n, steps, 4)).astype(np.float32),
            SB.ACTIONS: rng.integers(2, size=(n, steps)).astype(np.int64),
            SB.REWARDS: rewards.T.astype(np.float32),
            SB.DISCOUNTS: discounts.T.astype(np.float32),
            SB.STEP_TYPES: step_types.T.astype(np.int32),
            SB.state_in(0): (0.5 * rng.normal(size=(n, CELL))).astype(np.float32),
            SB.state_in(1): (0.5 * rng.normal(size=(n, CELL))).astype(np.float32),
        }
    )
    logp, _, _ = impala_forward(policy.get_weights(), batch)
    batch[SB.ACTION_LOGP] = (logp + rng.uniform(-1.2, 1.2, size=logp.shape)).astype(np.float32)
    return batch


def impala_forward(weights, batch):
    """Per-step ``logp, entropy, values`` ``[N, T+1]``: the LSTM along each fragment, reset at FIRST."""
    obs = batch[SB.OBS]
    n, steps = obs.shape[:2]
    dist_inputs, values = lstm_actor_critic(
        weights, obs.reshape(n * steps, -1), batch[SB.state_in(0)], batch[SB.state_in(1)], steps,
        resets=batch[SB.STEP_TYPES] == 0,
    )  # fmt: skip
    logp, entropy = logp_and_entropy(dist_inputs, batch[SB.ACTIONS].reshape(-1), False)
    return (x.reshape(n, steps) for x in (logp, entropy, values))


@pytest.mark.parametrize("backend", BACKENDS)
def test_impala_lstm_loss_runs_along_fragments_with_resets_at_first(tmp_path, backend, monkeypatch):
    """IMPALA's reference loss and V-trace targets (``tests/test_impala_loss_reference.py``) with the
    LSTM reference as the network."""
    import tests.test_impala_loss_reference as impala_reference

    policy = build(tmp_path, "impala", backend, False, {"entropy_coeff": 0.03, "vf_loss_coeff": 0.7})
    batch = impala_batch(policy)
    firsts = batch[SB.STEP_TYPES][:, 1:] == 0
    assert firsts.any()  # an episode starts inside a fragment: the reset matters
    monkeypatch.setattr(impala_reference, "forward", lambda w, b, continuous: impala_forward(w, b))
    monkeypatch.setattr(impala_reference, "SEQUENCES", 3)
    training = policy.config.training
    weights = policy.get_weights()
    vs, pg, rhos = impala_reference.vtrace_targets(weights, batch, training, False)
    _, expected = impala_reference.reference(weights, batch, training, False, vs, pg, rhos)
    grads = finite_difference_gradient(
        lambda w: impala_reference.reference(w, batch, training, False, vs, pg, rhos)[0], weights
    )
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert_update_is_sgd_on(update, grads, training.lr)
