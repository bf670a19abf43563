"""Every policy-gradient loss and DQN's target with action masks, on both backends, against numpy.

The references are the ones of ``test_*_loss_reference.py`` (each reads the batch's
``action_mask`` through ``numpy_reference.logp_and_entropy``, which restricts the
Categorical to the allowed actions); here the batches carry masks over 5 actions,
the taken action always allowed. Each case also checks that the mask changes the
numbers (the unmasked reference differs), so a loss that ignored the column fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete
from tests import test_actor_critic_loss_reference as ac_ref
from tests import test_dqn_loss_reference as dqn_ref
from tests import test_impala_loss_reference as impala_ref
from tests import test_ppo_loss_reference as ppo_ref
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_OBS,
    actor_critic,
    assert_update_is_sgd_on,
    finite_difference_gradient,
    global_norm,
    logp_and_entropy,
    make_policy,
    random_weights,
    resolve,
    sgd_step,
)

ACTIONS = Discrete(5)
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def random_mask(rng: np.random.Generator, actions: np.ndarray, n: int = ACTIONS.n) -> np.ndarray:
    """bool ``[*actions.shape, n]``: each action allowed with probability 1/2, the taken one always."""
    mask = rng.random((*actions.shape, n)) < 0.5
    np.put_along_axis(mask, actions[..., None].astype(np.int64), True, axis=-1)
    return mask


def build(tmp_path, algorithm, backend, training, model=None):
    config = resolve(
        tmp_path, algorithm, {"optimizer": "sgd", "grad_clip": None, **training}, model, backend=backend
    )
    policy = make_policy(config, backend, CARTPOLE_OBS, ACTIONS)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))
    return policy


def without_mask(batch: SB) -> SB:
    return SB({k: v for k, v in batch.items() if k not in (SB.ACTION_MASK, SB.NEXT_ACTION_MASK)})


def check_against(policy, batch, reference_loss, stats_of, step=sgd_step):
    """One step on ``batch``: stats and update equal the masked reference's, which differs from the unmasked."""
    weights = policy.get_weights()
    expected = stats_of(weights, batch)
    unmasked = stats_of(weights, without_mask(batch))
    assert any(abs(expected[k] - unmasked[k]) > 1e-3 for k in expected), "the mask changes nothing here"
    grads = finite_difference_gradient(lambda w: reference_loss(w, batch), weights)
    stats, update = step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    assert_update_is_sgd_on(update, grads, policy.config.training.lr)


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_ppo_loss_matches_the_numpy_reference(tmp_path, backend):
    policy = build(tmp_path, "ppo", backend, {"lr": 0.5, "sgd_minibatch_size": ppo_ref.N, "num_sgd_iter": 1,
                                               "entropy_coeff": 0.05, "vf_clip_param": 0.4})  # fmt: skip
    rng = np.random.default_rng(5)
    batch = ppo_ref.ppo_batch(policy, False)
    batch[SB.ACTION_MASK] = random_mask(rng, batch[SB.ACTIONS])
    dist_inputs, _ = actor_critic(policy.get_weights(), batch[SB.OBS])
    logp, _ = logp_and_entropy(dist_inputs, batch[SB.ACTIONS], False, batch[SB.ACTION_MASK])
    batch[SB.ACTION_LOGP] = (logp + 0.25 * rng.normal(size=len(logp))).astype(np.float32)
    training = policy.config.training

    def reference(w, b):
        return ppo_ref.reference(w, b, training, False, "tanh", training.clip_param)

    check_against(policy, batch, lambda w, b: reference(w, b)[0], lambda w, b: reference(w, b)[1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["pg", "a2c"])
def test_masked_pg_and_a2c_losses_match_the_numpy_reference(tmp_path, backend, algorithm):
    policy = build(tmp_path, algorithm, backend, {"lr": 0.5, "entropy_coeff": 0.05})
    training = policy.config.training
    batch = ac_ref.batch_for(policy, False)
    batch[SB.ACTION_MASK] = random_mask(np.random.default_rng(6), batch[SB.ACTIONS])
    normalize = bool(training.normalize_advantages)

    def reference(w, b):
        return ac_ref.reference(w, b, training, False, True, normalize)

    check_against(policy, batch, lambda w, b: reference(w, b)[0], lambda w, b: reference(w, b)[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_a3c_worker_gradients_match_the_numpy_reference(tmp_path, backend):
    policy = build(tmp_path, "a3c", backend, {"lr": 0.5, "entropy_coeff": 0.05})
    training = policy.config.training
    batch = ac_ref.batch_for(policy, False)
    batch[SB.ACTION_MASK] = random_mask(np.random.default_rng(7), batch[SB.ACTIONS])
    weights = policy.get_weights()
    _, expected = ac_ref.reference(weights, batch, training, False, True, False)
    _, unmasked = ac_ref.reference(weights, without_mask(batch), training, False, True, False)
    assert abs(expected["entropy"] - unmasked["entropy"]) > 1e-3
    grads = finite_difference_gradient(
        lambda w: ac_ref.reference(w, batch, training, False, True, False)[0], weights
    )
    worker_grads, stats = policy.compute_gradients(batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    for name, expected_grad in grads.items():
        np.testing.assert_allclose(worker_grads[name], expected_grad, rtol=2e-3, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_impala_loss_matches_the_numpy_reference(tmp_path, backend):
    policy = build(tmp_path, "impala", backend, {"lr": 0.3, "entropy_coeff": 0.03, "vf_loss_coeff": 0.7})
    batch = impala_ref.sequences(policy, False)
    batch[SB.ACTION_MASK] = random_mask(np.random.default_rng(8), batch[SB.ACTIONS])
    expected, grads, _ = impala_ref.expected_step(policy, batch, False)
    unmasked, _, _ = impala_ref.expected_step(policy, without_mask(batch), False)
    assert abs(expected["entropy"] - unmasked["entropy"]) > 1e-3
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert_update_is_sgd_on(update, grads, policy.config.training.lr)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("double_q", [False, True])
def test_dqn_target_maximises_over_the_next_observations_allowed_actions(tmp_path, backend, double_q):
    policy = build(
        tmp_path, "dqn", backend,
        {"lr": 0.3, "train_batch_size": dqn_ref.N, "double_q": double_q, "dueling": False, "huber_delta": 0.7},
        {"activation": "relu"},
    )  # fmt: skip
    policy.set_target_weights(random_weights(policy.get_weights(), seed=2, gain=1.5))
    rng = np.random.default_rng(9)
    batch = dqn_ref.transitions(scale=3.0)
    batch[SB.ACTIONS] = rng.integers(ACTIONS.n, size=len(batch)).astype(np.int64)
    mask = rng.random((len(batch), ACTIONS.n)) < 0.4
    mask[np.arange(len(batch)), rng.integers(ACTIONS.n, size=len(batch))] = True
    batch[SB.NEXT_ACTION_MASK] = mask
    training = policy.config.training
    target = policy.get_target_weights()
    weights = policy.get_weights()
    _, expected, td = dqn_ref.reference(weights, target, batch, training)
    _, unmasked, _ = dqn_ref.reference(weights, target, without_mask(batch), training)
    assert abs(expected["mean_target_q"] - unmasked["mean_target_q"]) > 1e-3  # the mask changes targets
    grads = finite_difference_gradient(lambda w: dqn_ref.reference(w, target, batch, training)[0], weights)
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    np.testing.assert_allclose(policy.td_errors, td, rtol=1e-4, atol=1e-5)
    assert_update_is_sgd_on(update, grads, training.lr)


def reference_next_masks(fragment, n):
    """For every trained (t, b) in time-major order, the mask at ``t + k`` (k as in the n-step sum)."""
    step_types, masks = fragment[SB.STEP_TYPES], fragment[SB.ACTION_MASK]
    T = len(step_types) - 1
    out = []
    for t in range(T):
        for b in range(step_types.shape[1]):
            if step_types[t, b] == dqn_ref.LAST:
                continue
            k = 0
            while k < n and t + k < T:
                k += 1
                if step_types[t + k, b] == dqn_ref.LAST:
                    break
            out.append(masks[t + k, b])
    return np.array(out)


@pytest.mark.parametrize("n_step", [1, 3])
def test_n_step_rows_carry_the_mask_of_their_next_observation_through_the_replay_buffer(n_step):
    from rlgear.blocks.replay_buffers import ReplayBuffer, n_step_transitions

    fragment = dqn_ref.fragment_with_both_episode_ends()
    fragment[SB.ACTIONS] = np.random.default_rng(10).integers(ACTIONS.n, size=(8, 2))
    fragment[SB.ACTION_MASK] = random_mask(np.random.default_rng(11), fragment[SB.ACTIONS])
    rows = n_step_transitions(fragment, n_step, 0.9)
    expected = reference_next_masks(fragment, n_step)
    np.testing.assert_array_equal(rows[SB.NEXT_ACTION_MASK], expected)
    assert not np.array_equal(rows[SB.NEXT_ACTION_MASK], rows[SB.ACTION_MASK])  # not the row's own mask
    buffer = ReplayBuffer(100, seed=0)
    buffer.add(rows)
    sampled = buffer.sample(50)
    slots = sampled["batch_indexes"]
    np.testing.assert_array_equal(sampled[SB.NEXT_ACTION_MASK], rows[SB.NEXT_ACTION_MASK][slots])
    assert sampled[SB.NEXT_ACTION_MASK].dtype == bool
