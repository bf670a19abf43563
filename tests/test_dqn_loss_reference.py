"""DQN's TD loss on both backends against an independent numpy reference, option by option.

The reference is written from the papers in float64: the Q-network (an MLP,
with the dueling head Q = V + A - mean(A) of Wang et al. 2016, eq. 9), the
target r + discount * max_a Q_target(s', a) (Mnih et al. 2015), or with double
Q the target network's value of the online network's argmax (van Hasselt et
al. 2016), the Huber or half-squared error of the TD error, each row scaled by
its prioritized-replay importance weight (Schaul et al. 2016), averaged over
the minibatch. n-step rows are built by DQN's own postprocessing from an ALF
fragment with a terminated and a truncated episode end, and the reference
computes their targets from the raw fragment.

Each case takes one plain-SGD step (``learn_on_batch``) and compares the loss,
every statistic, the per-row ``td_errors`` (what prioritized replay gets) and
the update of every weight with ``lr x`` the finite-difference gradient. The
rate (``cur_lr`` and the step size) is checked at two timesteps of an
``lr_schedule``.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.plugins.algorithms.dqn import DQN
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    assert_update_is_sgd_on,
    dense,
    finite_difference_gradient,
    global_norm,
    make_policy,
    mlp_body,
    random_weights,
    resolve,
    sgd_step,
)

N = 24
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5
FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def q_values(weights, obs, activation="relu"):
    """``[B, actions]`` from ``q/hidden_<i>``, then ``q/output`` or the dueling ``q/value`` + ``q/advantage``."""
    features = mlp_body(weights, "q", np.asarray(obs, np.float64), activation)
    if "q/output/kernel" in weights:
        return dense(weights, "q/output", features)
    advantages = dense(weights, "q/advantage", features)
    return dense(weights, "q/value", features) + advantages - advantages.mean(axis=-1, keepdims=True)


def huber(x, delta):
    return np.where(np.abs(x) <= delta, 0.5 * x**2, delta * (np.abs(x) - 0.5 * delta))


def reference(weights, target_weights, batch: SB, training, activation="relu"):
    """``(loss, stats, |td errors|)`` of one minibatch of (n-step) transitions."""
    q = q_values(weights, batch[SB.OBS], activation)
    q_taken = q[np.arange(len(q)), batch[SB.ACTIONS]]
    next_target = q_values(target_weights, batch[NEXT_OBS], activation)
    next_online = q_values(weights, batch[NEXT_OBS], activation)
    if SB.NEXT_ACTION_MASK in batch:  # the max (and double Q's argmax) runs over next_obs's allowed actions
        next_target = np.where(batch[SB.NEXT_ACTION_MASK], next_target, -np.inf)
        next_online = np.where(batch[SB.NEXT_ACTION_MASK], next_online, -np.inf)
    if training.double_q:
        chosen = next_online.argmax(axis=-1)
        next_q = next_target[np.arange(len(q)), chosen]
    else:
        next_q = next_target.max(axis=-1)
    targets = batch[SB.REWARDS].astype(np.float64) + batch[SB.DISCOUNTS].astype(np.float64) * next_q
    td = q_taken - targets
    per_row = huber(td, training.huber_delta) if training.td_error_loss_fn == "huber" else 0.5 * td**2
    if WEIGHTS in batch:
        per_row = per_row * batch[WEIGHTS]
    loss = per_row.mean()
    stats = {
        "mean_q": q_taken.mean(),
        "mean_target_q": targets.mean(),
        "mean_td_error": np.abs(td).mean(),
        "total_loss": loss,
    }
    return loss, stats, np.abs(td)


def transitions(seed=0, weights=False, scale=1.0):
    rng = np.random.default_rng(seed)
    columns = {
        SB.OBS: rng.normal(size=(N, 4)).astype(np.float32),
        SB.ACTIONS: rng.integers(2, size=N).astype(np.int64),
        SB.REWARDS: (scale * rng.normal(size=N)).astype(np.float32),
        NEXT_OBS: rng.normal(size=(N, 4)).astype(np.float32),
        # gamma**k after k steps, 0 after a terminal
        SB.DISCOUNTS: (0.97 * (rng.random(N) > 0.25)).astype(np.float32),
    }
    if weights:
        columns[WEIGHTS] = rng.uniform(0.1, 1.0, size=N).astype(np.float32)
    return SB(columns)


def build(tmp_path, backend, training, model=None):
    base = {"optimizer": "sgd", "lr": 0.3, "grad_clip": None, "train_batch_size": N}
    config = resolve(
        tmp_path, "dqn", {**base, **training}, {"activation": "relu", **(model or {})}, backend=backend
    )
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    policy.set_weights(random_weights(policy.get_weights(), seed=1, gain=1.5))
    # A target network that differs from the online one (so double Q and plain max differ).
    policy.set_target_weights(random_weights(policy.get_weights(), seed=2, gain=1.5))
    return policy


def check_step(policy, batch, lr: float | None = None):
    """One ``learn_on_batch`` against the reference; ``lr`` is the rate expected (default ``training.lr``)."""
    training = policy.config.training
    lr = training.lr if lr is None else lr
    grad_clip = training.grad_clip  # read before the step, as lr
    weights, target = policy.get_weights(), policy.get_target_weights()
    _, expected, td = reference(weights, target, batch, training)
    grads = finite_difference_gradient(lambda w: reference(w, target, batch, training)[0], weights)
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    np.testing.assert_allclose(policy.td_errors, td, rtol=1e-4, atol=1e-5, err_msg="td_errors")
    assert stats["cur_lr"] == pytest.approx(lr)
    if grad_clip is not None:
        assert global_norm(grads) > grad_clip
    assert_update_is_sgd_on(update, grads, lr, grad_clip)
    return expected, td


CASES = {
    # name: (training, model, batch kwargs)
    "double-dueling-huber": ({"double_q": True, "dueling": True, "huber_delta": 0.7}, {}, {}),
    "plain-max-mse": ({"double_q": False, "dueling": False, "td_error_loss_fn": "mse"}, {}, {}),
    "double-plain-huber": ({"double_q": True, "dueling": False, "huber_delta": 0.7}, {}, {}),
    "max-dueling-mse": ({"double_q": False, "dueling": True, "td_error_loss_fn": "mse"}, {}, {}),
    "importance-weights": ({"huber_delta": 0.7}, {}, {"weights": True}),
    "grad-clip-active": ({"grad_clip": 0.05, "huber_delta": 0.7}, {}, {}),
    "two-hidden-layers": (
        {"double_q": True, "dueling": True, "huber_delta": 5.0},
        {"hidden_sizes": [8, 6]},
        {},
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_dqn_loss_stats_td_errors_and_update_match_the_numpy_reference(tmp_path, backend, case):
    training, model, batch_kwargs = CASES[case]
    policy = build(tmp_path, backend, training, model)
    batch = transitions(**batch_kwargs, scale=3.0)
    _, td = check_step(policy, batch)
    delta = policy.config.training.huber_delta
    assert (td < delta).any() and (td > delta).any()  # both pieces of the Huber loss are used


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("timestep", [20_000, 70_000])
def test_lr_schedule_sets_the_step_size_at_the_policys_global_timestep(tmp_path, backend, timestep):
    """The schedule's rate at the timestep (0.42 and 0.22), not ``lr`` (0.3): in ``cur_lr`` and in the step."""
    policy = build(tmp_path, backend, {"lr_schedule": [[0, 0.5], [100_000, 0.1]], "huber_delta": 0.7})
    policy.set_global_timestep(timestep)
    lr = 0.5 - 0.4 * timestep / 100_000
    assert lr != pytest.approx(policy.config.training.lr)
    check_step(policy, transitions(scale=3.0), lr=lr)


def test_double_q_cases_have_rows_where_online_and_target_networks_disagree(tmp_path):
    policy = build(tmp_path, "torch", {"double_q": True})
    next_obs = transitions()[NEXT_OBS]
    online = q_values(policy.get_weights(), next_obs).argmax(axis=-1)
    target = q_values(policy.get_target_weights(), next_obs).argmax(axis=-1)
    assert (online != target).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_importance_weights_scale_each_rows_loss(tmp_path, backend):
    """The same rows with and without weights: the weighted loss is the mean of weight x row loss."""
    weighted = transitions(weights=True, scale=3.0)
    plain = SB({k: v for k, v in weighted.items() if k != WEIGHTS})
    losses = {}
    for name, batch in (("weighted", weighted), ("plain", plain)):
        policy = build(tmp_path / name, backend, {"huber_delta": 0.7})
        expected, _ = check_step(policy, batch)
        losses[name] = expected["total_loss"]
    assert losses["weighted"] < 0.9 * losses["plain"]  # weights in [0.1, 1] shrink the loss


# ----------------------------------------------------------------------------- n-step rows from a fragment


def fragment_with_both_episode_ends(seed=0):
    """``[T+1=8, B=2]``: env 0 terminates at t=3 and restarts; env 1 is truncated at t=5 and restarts."""
    rng = np.random.default_rng(seed)
    step_types = np.array(
        [
            [FIRST, MID],
            [MID, MID],
            [MID, MID],
            [LAST, MID],
            [FIRST, MID],
            [MID, LAST],
            [MID, FIRST],
            [MID, MID],
        ],
        dtype=np.int32,
    )
    discounts = np.ones((8, 2), dtype=np.float32)
    discounts[3, 0] = 0.0  # terminated; env 1's LAST at t=5 keeps discount 1 (truncated)
    rewards = rng.normal(size=(8, 2)).astype(np.float32)
    rewards[step_types == FIRST] = 0.0
    return SB(
        {
            SB.OBS: rng.normal(size=(8, 2, 4)).astype(np.float32),
            SB.ACTIONS: rng.integers(2, size=(8, 2)).astype(np.int64),
            SB.REWARDS: rewards,
            SB.DISCOUNTS: discounts,
            SB.STEP_TYPES: step_types,
        }
    )


def reference_n_step_targets(fragment, n, gamma, next_value):
    """For every trained (t, b) in time-major order: sum_i gamma^(i-1) r[t+i] + gamma^k d[t+k] V(s[t+k]).

    The sum runs until n rewards, the episode's LAST step or the fragment's bootstrap row,
    whichever comes first; ``next_value(obs)`` is the bootstrap value of an observation.
    """
    step_types, rewards = fragment[SB.STEP_TYPES], fragment[SB.REWARDS].astype(np.float64)
    discounts, obs = fragment[SB.DISCOUNTS].astype(np.float64), fragment[SB.OBS]
    T = len(step_types) - 1
    targets, rows = [], []
    for t in range(T):
        for b in range(step_types.shape[1]):
            if step_types[t, b] == LAST:
                continue  # its action is never trained on
            total, k = 0.0, 0
            while k < n and t + k < T:
                k += 1
                total += gamma ** (k - 1) * rewards[t + k, b]
                if step_types[t + k, b] == LAST:
                    break
            total += gamma**k * discounts[t + k, b] * next_value(obs[t + k, b])
            targets.append(total)
            rows.append(obs[t, b])
    return np.array(targets), np.array(rows)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_step", [1, 3])
def test_n_step_rows_from_a_fragment_give_the_reference_targets(tmp_path, backend, n_step):
    gamma = 0.9
    policy = build(tmp_path, backend, {"n_step": n_step, "gamma": gamma, "double_q": False})
    fragment = fragment_with_both_episode_ends()
    rows = DQN.postprocess(fragment, policy, policy.config)
    target_weights = policy.get_target_weights()
    expected_targets, expected_obs = reference_n_step_targets(
        fragment, n_step, gamma, lambda o: q_values(target_weights, o[None])[0].max()
    )
    np.testing.assert_array_equal(rows[SB.OBS], expected_obs)  # the same rows, in the same order
    row_targets = rows[SB.REWARDS] + rows[SB.DISCOUNTS] * q_values(target_weights, rows[NEXT_OBS]).max(
        axis=-1
    )
    np.testing.assert_allclose(row_targets, expected_targets, rtol=1e-5, atol=1e-6)
    assert (rows[SB.DISCOUNTS] == 0).any()  # a terminated window does not bootstrap
    # The policy learns from those rows exactly as the reference says.
    check_step(policy, SB({k: rows[k] for k in (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, NEXT_OBS)}))
