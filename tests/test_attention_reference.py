"""The attention memory (``model.attention``, GTrXL) on both backends against a float64 numpy reference.

The reference (``tests/attention_reference.py``) runs one step at a time over lists of remembered
block inputs; the backends run masked attention over whole sequences. Checked: the model's outputs
and the state it hands on (memory shifting, resets at FIRST), the gates' near-identity start,
losses and their gradients through the blocks (one plain-SGD step moves every weight by
``lr x`` the reference's finite-difference gradient), IMPALA's fixed sequences with resets inside,
and a planted bug (attention across an episode reset) that the reference catches.
"""

from __future__ import annotations

import numpy as np
import pytest

import tests.test_impala_loss_reference as impala_reference
import tests.test_lstm_loss_reference as lstm_losses
from rlgear.sample_batch import SampleBatch as SB
from tests.attention_reference import attention_actor_critic, layer_norm, update_gate
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    PENDULUM_ACT,
    PENDULUM_OBS,
    assert_update_is_sgd_on,
    dense,
    finite_difference_gradient,
    logp_and_entropy,
    make_policy,
    mlp_body,
    random_weights,
    resolve,
    sgd_step,
)

DIM, HEADS, LAYERS, MEMORY, L = 4, 2, 2, 3, 4
MODEL = {
    "hidden_sizes": [4],
    "attention": True,
    "attention_dim": DIM,
    "attention_heads": HEADS,
    "attention_layers": LAYERS,
    "attention_memory": MEMORY,
    "attention_mlp_dim": 6,
    "max_seq_len": L,
}
WIDTH = LAYERS * MEMORY * DIM

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def build(tmp_path, algorithm, backend, continuous=False, training=None, randomize=True):
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    config = resolve(
        tmp_path, algorithm, {"optimizer": "sgd", "lr": 0.5, "grad_clip": None, **(training or {})}, MODEL,
        env="Pendulum-v1" if continuous else "CartPole-v1", backend=backend,
    )  # fmt: skip
    policy = make_policy(config, backend, obs_space, act_space)
    if randomize:
        weights = random_weights(policy.get_weights(), gain=1.5)
        for name in weights:  # layer-norm scales near 1, as trained ones are (random_weights draws ~0)
            if name.endswith("/scale"):
                weights[name] = (1.0 + weights[name]).astype(np.float32)
        policy.set_weights(weights)
    return policy


def random_state(rng, n):
    """Memories whose first slots are empty (garbage there: masked keys must not count)."""
    valid = rng.integers(0, MEMORY + 1, size=n)
    mask = (np.arange(MEMORY)[None, :] >= MEMORY - valid[:, None]).astype(np.float32)
    memory = rng.normal(size=(n, LAYERS, MEMORY, DIM))
    memory = np.where(mask[:, None, :, None] > 0, memory, 40.0 * rng.normal(size=memory.shape))
    return memory.reshape(n, WIDTH).astype(np.float32), mask


def model_unroll(policy, backend, obs, state, seq_len, resets=None):
    """The framework model over ``N`` sequences of ``seq_len`` rows: numpy outputs and state."""
    if backend == "torch":
        import torch

        with torch.no_grad():
            out = policy.model(
                torch.from_numpy(obs), [torch.from_numpy(s) for s in state], None, None, seq_len,
                None if resets is None else torch.from_numpy(resets.reshape(-1)),
            )  # fmt: skip
        return out[0].numpy(), out[1].numpy(), [s.numpy() for s in out[2]]
    import tensorflow as tf

    out = policy.model(
        tf.constant(obs), [tf.constant(s) for s in state], None, None, seq_len,
        None if resets is None else tf.constant(resets.reshape(-1)),
    )  # fmt: skip
    return out[0].numpy(), out[1].numpy(), [s.numpy() for s in out[2]]


def assert_state_equal(state, memory, mask):
    np.testing.assert_array_equal(state[1], mask)
    np.testing.assert_allclose(
        state[0] * np.repeat(np.tile(mask, LAYERS), DIM, axis=1), memory, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("with_resets", [False, True], ids=["no-resets", "resets"])
def test_outputs_and_state_match_the_float64_reference(tmp_path, backend, continuous, with_resets):
    policy = build(tmp_path, "ppo", backend, continuous)
    rng = np.random.default_rng(0)
    n = 4
    obs = rng.normal(size=(n * L, policy.observation_space.size)).astype(np.float32)
    memory, mask = random_state(rng, n)
    resets = None
    if with_resets:
        resets = np.zeros((n, L), bool)
        resets[0, 2] = resets[1, 0] = resets[2, 1] = resets[2, 3] = True
    dist_inputs, values, state = model_unroll(policy, backend, obs, [memory, mask], L, resets)
    ref = attention_actor_critic(policy.get_weights(), obs, memory, mask, L, HEADS, resets=resets)
    np.testing.assert_allclose(dist_inputs, ref[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values, ref[1], rtol=1e-4, atol=1e-5)
    assert_state_equal(state, ref[2], ref[3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_holds_the_last_block_inputs_and_a_reset_empties_it(tmp_path, backend):
    """Step by step from an empty memory: after k steps the last min(k, M) slots are valid and hold
    each layer's inputs of those steps (layer 0's: the projected observations); a reset (FIRST)
    leaves only its own step. Stepping one row at a time equals one unroll of the whole sequence."""
    policy = build(tmp_path, "ppo", backend)
    rng = np.random.default_rng(1)
    steps = 6
    obs = rng.normal(size=(steps, 4)).astype(np.float32)
    resets = np.zeros((1, steps), bool)
    resets[0, 4] = True
    state = [np.zeros((1, WIDTH), np.float32), np.zeros((1, MEMORY), np.float32)]
    w = {k: v.astype(np.float64) for k, v in policy.get_weights().items()}
    projected = dense(w, "attention/input", mlp_body(w, "shared", obs.astype(np.float64), "tanh"))
    stepped = []
    for t in range(steps):
        dist_inputs, _, state = model_unroll(policy, backend, obs[t : t + 1], state, 1, resets[:, t : t + 1])
        stepped.append(dist_inputs[0])
        since = t - 4 + 1 if t >= 4 else t + 1  # steps of the current episode
        valid = min(since, MEMORY)
        np.testing.assert_array_equal(state[1][0], [0.0] * (MEMORY - valid) + [1.0] * valid)
        layer0 = state[0].reshape(LAYERS, MEMORY, DIM)[0]
        np.testing.assert_allclose(
            layer0[MEMORY - valid :], projected[t + 1 - valid : t + 1], rtol=1e-5, atol=1e-5
        )
    empty = [np.zeros((1, WIDTH), np.float32), np.zeros((1, MEMORY), np.float32)]
    unrolled, _, _ = model_unroll(policy, backend, obs, empty, steps, resets)
    np.testing.assert_allclose(np.stack(stepped), unrolled, rtol=1e-5, atol=1e-5)


def test_gates_start_near_the_identity(tmp_path):
    """GTrXL's ``b_g`` = 2 at initialisation: every update gate's bias is 2 (both backends build it so,
    tests/test_attention_policy.py compares their initial weights' names) and the gates let through
    only ~12% of the sub-layers at the start, so each block starts close to the identity map."""
    policy = build(tmp_path, "ppo", "torch", randomize=False)
    w = {k: v.astype(np.float64) for k, v in policy.get_weights().items()}
    biases = [v for k, v in w.items() if k.endswith(("gate_attn/bias", "gate_mlp/bias"))]
    assert len(biases) == 2 * LAYERS and all(np.all(b == 2.0) for b in biases)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(64, DIM))
    z = [
        update_gate(
            w, f"attention/block_{layer}/{gate}", row, layer_norm(w, "attention/block_0/norm_mlp", row)
        )
        for layer in range(LAYERS)
        for gate in ("gate_attn", "gate_mlp")
        for row in x
    ]
    assert 0.05 < float(np.mean(z)) < 0.25


# --- losses and gradients through the blocks ------------------------------------------------------------
LENGTHS = [4, 2, 1, 3]  # real rows of each padded sequence of L


def padded_batch(policy, continuous: bool, seed: int = 0) -> SB:
    """Padded sequences whose padding rows and non-first state rows hold garbage (as the LSTM's test)."""
    rng = np.random.default_rng(seed)
    n = len(LENGTHS) * L
    seq_mask = np.zeros(n, np.float32)
    for i, length in enumerate(LENGTHS):
        seq_mask[i * L : i * L + length] = 1.0
    pad = seq_mask == 0
    obs = rng.normal(size=(n, policy.observation_space.size)).astype(np.float32)
    obs[pad] = rng.normal(size=(int(pad.sum()), obs.shape[1])) * 30.0
    if continuous:
        actions = rng.normal(size=(n, policy.action_space.size)).astype(np.float32)
    else:
        actions = rng.integers(policy.action_space.n, size=n).astype(np.int64)
    memory = (rng.normal(size=(n, WIDTH)) * 20.0).astype(np.float32)
    mask = rng.integers(0, 2, size=(n, MEMORY)).astype(np.float32)
    memory[::L], mask[::L] = random_state(rng, len(LENGTHS))
    batch = SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: actions,
            SB.SEQ_MASK: seq_mask,
            SB.state_in(0): memory,
            SB.state_in(1): mask,
            SB.ADVANTAGES: np.where(pad, 100.0, 0.7 + 2.0 * rng.normal(size=n)).astype(np.float32),
        }
    )
    dist_inputs, values = reference_outputs(policy.get_weights(), batch, "tanh")
    logp, _ = logp_and_entropy(dist_inputs, actions, continuous)
    batch[SB.ACTION_LOGP] = np.where(pad, -50.0, logp + 0.25 * rng.normal(size=n)).astype(np.float32)
    batch[SB.VF_PREDS] = np.where(pad, 80.0, values + rng.uniform(-1.0, 1.0, size=n)).astype(np.float32)
    batch[SB.VALUE_TARGETS] = np.where(pad, -90.0, values + rng.normal(size=n)).astype(np.float32)
    return batch


def reference_outputs(weights, batch, activation):
    """The reference from each sequence's first state row (what ``lstm_losses``' loss references call)."""
    out = attention_actor_critic(
        weights, batch[SB.OBS], batch[SB.state_in(0)][::L], batch[SB.state_in(1)][::L], L, HEADS, activation
    )
    return out[0], out[1]


CASES = {
    "ppo-discrete": ("ppo", False, {"sgd_minibatch_size": 16, "num_sgd_iter": 1, "entropy_coeff": 0.03}),
    "a2c-continuous": ("a2c", True, {"entropy_coeff": 0.04}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_sequence_loss_and_gradients_through_the_blocks_match_the_reference(
    tmp_path, backend, case, monkeypatch
):
    """The LSTM tests' loss references (ppo, a2c) with the attention reference as the network."""
    monkeypatch.setattr(lstm_losses, "reference_outputs", reference_outputs)
    algorithm, continuous, training_overrides = CASES[case]
    policy = build(tmp_path, algorithm, backend, continuous, training_overrides)
    training = policy.config.training
    batch = padded_batch(policy, continuous)
    weights = policy.get_weights()
    reference = lstm_losses.REFERENCES[algorithm]
    _, expected = reference(weights, batch, training, continuous, "tanh")
    grads = finite_difference_gradient(
        lambda w: reference(w, batch, training, continuous, "tanh")[0], weights
    )
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    for layer in range(LAYERS):  # the gradient reaches every block's attention and its memory positions
        assert np.abs(grads[f"attention/block_{layer}/attn/key/kernel"]).max() > 1e-4
        assert np.abs(grads[f"attention/block_{layer}/attn/distance_bias"]).max() > 1e-4
    assert_update_is_sgd_on(update, grads, training.lr)


def impala_batch(policy, seed: int = 0):
    from tests.test_vtrace import random_episodes

    rng = np.random.default_rng(seed)
    n, steps = 3, 7
    _, rewards, _, step_types, discounts = random_episodes(rng, T=steps, B=n, gamma=1.0)
    memory, mask = random_state(rng, n)
    batch = SB(
        {
            SB.OBS: rng.normal(size=(n, steps, 4)).astype(np.float32),
            SB.ACTIONS: rng.integers(2, size=(n, steps)).astype(np.int64),
            SB.REWARDS: rewards.T.astype(np.float32),
            SB.DISCOUNTS: discounts.T.astype(np.float32),
            SB.STEP_TYPES: step_types.T.astype(np.int32),
            SB.PREV_ACTIONS: np.zeros((n, steps), np.int64),
            SB.state_in(0): memory,
            SB.state_in(1): mask,
        }
    )
    logp, _, _ = impala_forward(policy.get_weights(), batch)
    batch[SB.ACTION_LOGP] = (logp + rng.uniform(-1.2, 1.2, size=logp.shape)).astype(np.float32)
    return batch


def impala_forward(weights, batch):
    """Per-step ``logp, entropy, values`` ``[N, T+1]``: the reference along each fragment, reset at FIRST."""
    obs = batch[SB.OBS]
    n, steps = obs.shape[:2]
    dist_inputs, values, _, _ = attention_actor_critic(
        weights, obs.reshape(n * steps, -1), batch[SB.state_in(0)], batch[SB.state_in(1)], steps, HEADS,
        resets=batch[SB.STEP_TYPES] == 0,
    )  # fmt: skip
    logp, entropy = logp_and_entropy(dist_inputs, batch[SB.ACTIONS].reshape(-1), False)
    return (x.reshape(n, steps) for x in (logp, entropy, values))


@pytest.mark.parametrize("backend", BACKENDS)
def test_impala_loss_attends_within_episodes_along_fragments(tmp_path, backend, monkeypatch):
    """IMPALA's reference loss and V-trace targets with the attention reference as the network: a step
    after a FIRST inside the fragment attends to its own episode only."""
    policy = build(tmp_path, "impala", backend, False, {"entropy_coeff": 0.03, "vf_loss_coeff": 0.7})
    batch = impala_batch(policy)
    assert (batch[SB.STEP_TYPES][:, 1:] == 0).any()  # an episode starts inside a fragment
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
        assert stats[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    assert_update_is_sgd_on(update, grads, training.lr)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reference_catches_attention_across_an_episode_reset(tmp_path, backend, monkeypatch):
    """A planted bug: the backend's mask ignores resets, so a FIRST step still sees the old episode.
    The outputs then differ from the reference's at and after the reset (and only there)."""
    module = __import__(f"rlgear.plugins.backends.{backend}.attention", fromlist=["attention_mask"])
    correct = module.attention_mask
    monkeypatch.setattr(module, "attention_mask", lambda mask, resets, length: correct(mask, None, length))
    policy = build(tmp_path, "ppo", backend)
    rng = np.random.default_rng(5)
    obs = rng.normal(size=(L, 4)).astype(np.float32)
    memory, mask = random_state(rng, 1)
    mask[:] = 1.0
    resets = np.zeros((1, L), bool)
    resets[0, 2] = True
    buggy, _, _ = model_unroll(policy, backend, obs, [memory, mask], L, resets)
    ref = attention_actor_critic(policy.get_weights(), obs, memory, mask, L, HEADS, resets=resets)[0]
    np.testing.assert_allclose(buggy[:2], ref[:2], rtol=1e-4, atol=1e-5)  # before the reset: the same
    assert np.abs(buggy[2:] - ref[2:]).max() > 1e-3  # after it: caught
