"""Discrete SAC (Christodoulou 2019) against an independent float64 numpy reference, on both backends.

The reference is written from the paper (arXiv:1910.07207, sec. 4) from the framework-neutral
weights: the actor ``policy/...`` outputs the ``n`` logits of ``pi(.|s)``; the stacked critics
``q/...`` ``[K, in, out]`` map the observation to one Q per action, member by member::

    V(s')   = sum_a pi(a|s') (min_k Q'_k(s', a) - alpha log pi(a|s'))
    y       = r + discount V(s')              (n-step sums: discount gamma^n, 0 after a terminal)
    critic  = 0.5 sum_k mean (Q_k(s, a) - y)^2      (x importance weights)
    actor   = mean sum_a pi(a|s) (alpha log pi(a|s) - min_k Q_k(s, a))
    alpha   = mean log_alpha (H(pi(.|s)) - target entropy),   target 0.98 log n by default

Each case takes one plain-SGD step and compares every statistic, the per-row ``|TD error|`` and
each weight's update with ``lr x`` the finite-difference gradient of its group's loss, then the
Polyak update of the targets (``check_step`` of the continuous SAC's reference test).
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS
from rlgear.plugins.algorithms.sac import SAC
from rlgear.policy import categorical_sample
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete
from tests.conftest import BACKENDS, needs_tf, train_until_stop
from tests.numpy_reference import (
    CARTPOLE_OBS,
    dense,
    make_policy,
    mlp_body,
    random_weights,
    resolve,
)
from tests.test_offpolicy import timestep_of
from tests.test_offpolicy_loss_reference import check_step, critic_loss_and_td

N = 24
NUM_ACTIONS = 3  # more than CartPole's two, so that the sums over actions are not a pair
ACTIONS = Discrete(NUM_ACTIONS)


def logits_of(weights, obs):
    return dense(weights, "policy/output", mlp_body(weights, "policy", np.asarray(obs, np.float64), "relu"))


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def action_values(weights, obs):
    """``[K, B, n]``: each stacked critic on the observation, one member at a time."""
    members = np.shape(weights["q/output/kernel"])[0]
    out = []
    for k in range(members):
        member = {name: np.asarray(value)[k] for name, value in weights.items() if name.startswith("q/")}
        out.append(dense(member, "q/output", mlp_body(member, "q", np.asarray(obs, np.float64), "relu")))
    return np.stack(out)


def discrete_sac_reference(weights, target, batch, training):
    log_alpha = float(np.asarray(weights["log_alpha"], np.float64)[0])
    alpha = np.exp(log_alpha)
    target_entropy = (
        training.target_entropy_scale * np.log(NUM_ACTIONS)
        if training.target_entropy is None
        else training.target_entropy
    )
    next_logp = log_softmax(logits_of(weights, batch[NEXT_OBS]))
    next_q = action_values(target, batch[NEXT_OBS]).min(axis=0)
    next_v = (np.exp(next_logp) * (next_q - alpha * next_logp)).sum(axis=-1)
    targets = batch[SB.REWARDS] + batch[SB.DISCOUNTS] * next_v
    actions = np.asarray(batch[SB.ACTIONS], np.int64)
    q_taken = action_values(weights, batch[SB.OBS])[:, np.arange(N), actions]
    critic_loss, td = critic_loss_and_td(q_taken, targets, batch)
    logp = log_softmax(logits_of(weights, batch[SB.OBS]))
    probs = np.exp(logp)
    q_min = action_values(weights, batch[SB.OBS]).min(axis=0)
    actor_loss = (probs * (alpha * logp - q_min)).sum(axis=-1).mean()
    entropy = -(probs * logp).sum(axis=-1)
    alpha_loss = (log_alpha * (entropy - target_entropy)).mean()
    losses = {"q/": critic_loss, "policy/": actor_loss}
    if training.tune_alpha:
        losses["log_alpha"] = alpha_loss
    stats = {
        "critic_loss": critic_loss,
        "actor_loss": actor_loss,
        "alpha_loss": alpha_loss,
        "alpha": alpha,
        "entropy": entropy.mean(),
        "mean_q": q_taken.mean(),
        "mean_target_q": targets.mean(),
        "mean_td_error": td.mean(),
        "total_loss": sum(losses.values()),
    }
    return losses, stats, td


def transitions(seed=0, weights=False, n_step=1, gamma=0.97):
    """Rows as the replay buffer gives them: ``n_step`` discounted reward sums, discount ``gamma^n``
    (``gamma^k`` for a window cut after ``k < n`` steps), 0 after a terminal."""
    rng = np.random.default_rng(seed)
    steps = rng.integers(1, n_step + 1, size=N)
    discounts = gamma**steps * (rng.random(N) > 0.25)
    columns = {
        SB.OBS: rng.normal(size=(N, 4)).astype(np.float32),
        SB.ACTIONS: rng.integers(NUM_ACTIONS, size=N),
        SB.REWARDS: (3.0 * rng.normal(size=N)).astype(np.float32),
        NEXT_OBS: rng.normal(size=(N, 4)).astype(np.float32),
        SB.DISCOUNTS: discounts.astype(np.float32),
    }
    assert (columns[SB.DISCOUNTS] == 0).any() and (columns[SB.DISCOUNTS] > 0).any()
    if weights:
        columns[WEIGHTS] = rng.uniform(0.1, 1.0, size=N).astype(np.float32)
    return SB(columns)


def build(tmp_path, training, backend="torch", seed=1):
    base = {"optimizer": "sgd", "lr": 0.05, "grad_clip": None, "train_batch_size": N, "learning_starts": 0}
    config = resolve(tmp_path, "sac", {**base, **training}, {"activation": "relu", "hidden_sizes": [8, 6]})
    policy = make_policy(config, backend, CARTPOLE_OBS, ACTIONS)
    weights = random_weights(policy.get_weights(), seed=seed, gain=1.5)
    weights["log_alpha"] = np.array([np.log(training.get("initial_alpha", 0.7))], np.float32)
    policy.set_weights(weights)
    policy.set_target_weights(random_weights(policy.get_target_weights(), seed=seed + 1, gain=1.5))
    return policy


CASES = {
    "tuned-alpha": {},
    "fixed-alpha": {"tune_alpha": False, "initial_alpha": 0.3},
    "target-entropy": {"target_entropy": 0.2, "initial_alpha": 1.3},
    "target-entropy-scale": {"target_entropy_scale": 0.5},
    "importance-weights": {"prioritized_replay": True},
    "grad-clip-active": {"grad_clip": 0.5},
    "n-step": {"n_step": 3},
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_discrete_sac_losses_td_errors_and_update_match_the_numpy_reference(tmp_path, case, backend):
    training = {"tau": 0.1, **CASES[case]}
    policy = build(tmp_path, training, backend=backend)
    assert type(policy).__name__.startswith("DiscreteSAC")
    config = policy.config.training
    batch = transitions(weights=config.prioritized_replay, n_step=config.n_step)

    def reference(weights, target):
        return discrete_sac_reference(weights, target, batch, config)

    log_alpha = policy.get_weights()["log_alpha"].copy()
    stats = check_step(policy, batch, reference, tau=0.1)
    assert (policy.get_weights()["log_alpha"] != log_alpha) == bool(config.tune_alpha)
    if case == "target-entropy-scale":  # the default target 0.98 log n is not what this case used
        assert policy.target_entropy == pytest.approx(0.5 * np.log(NUM_ACTIONS))
    assert stats["entropy"] > 0


def test_the_default_target_entropy_is_christodoulou_s_098_log_n(tmp_path):
    policy = build(tmp_path, {})
    assert policy.target_entropy == pytest.approx(0.98 * np.log(NUM_ACTIONS))


def test_a_target_entropy_scale_outside_0_1_is_refused_naming_the_key(tmp_path):
    with pytest.raises(Exception, match=r"training\.target_entropy_scale.*\(0, 1\]"):
        resolve(tmp_path, "sac", {"target_entropy_scale": 1.5})


def test_sac_declares_discrete_actions_and_the_continuous_policy_still_refuses_them(tmp_path):
    assert SAC.capabilities()["discrete"] and SAC.capabilities()["continuous"]
    from rlgear.plugins.algorithms.sac.cql_torch_policy import CQLTorchPolicy

    config = resolve(tmp_path, "cql", {})
    with pytest.raises(TypeError, match="bounded one-dimensional Box"):
        CQLTorchPolicy(CARTPOLE_OBS, ACTIONS, config)  # a subclass of SAC's policy is built as it is


# ----------------------------------------------------------------------------- acting


def test_categorical_sample_follows_the_softmax_and_greedy_acting_takes_the_argmax(tmp_path):
    rng = np.random.default_rng(0)
    logits = np.tile(np.log([[0.2, 0.5, 0.3]]), (60_000, 1))
    counts = np.bincount(categorical_sample(logits, rng), minlength=3) / 60_000
    np.testing.assert_allclose(counts, [0.2, 0.5, 0.3], atol=0.01)

    policy = build(tmp_path, {"learning_starts": 0})
    obs = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
    timestep = timestep_of(obs)
    greedy, _, _ = policy.compute_actions(timestep, explore=False)
    expected = logits_of(policy.get_weights(), obs).argmax(axis=-1)
    np.testing.assert_array_equal(greedy, expected)
    np.testing.assert_array_equal(policy.greedy_actions(obs), expected)
    explored, _, _ = policy.compute_actions(timestep, explore=True)
    assert explored.dtype == np.int64 and ((explored >= 0) & (explored < NUM_ACTIONS)).all()


@needs_tf
def test_a_torch_checkpoint_acts_and_learns_identically_on_tf(tmp_path):
    """Same weight names and layouts: the TF policy loaded with torch's weights has the same greedy
    actions and takes the same SGD step (same losses, same updated weights)."""
    torch_policy = build(tmp_path / "torch", {"tau": 0.1}, backend="torch")
    tf_policy = build(tmp_path / "tf", {"tau": 0.1}, backend="tf")
    assert set(torch_policy.get_weights()) == set(tf_policy.get_weights())
    tf_policy.set_weights(torch_policy.get_weights())
    tf_policy.set_target_weights(torch_policy.get_target_weights())
    obs = np.random.default_rng(2).normal(size=(32, 4)).astype(np.float32)
    np.testing.assert_array_equal(torch_policy.greedy_actions(obs), tf_policy.greedy_actions(obs))
    batch = transitions()
    torch_stats, tf_stats = torch_policy.learn_on_batch(batch), tf_policy.learn_on_batch(batch)
    for key in ("critic_loss", "actor_loss", "alpha_loss", "entropy"):
        assert tf_stats[key] == pytest.approx(torch_stats[key], rel=1e-4, abs=1e-5), key
    for name, value in torch_policy.get_weights().items():
        np.testing.assert_allclose(tf_policy.get_weights()[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_state_round_trips_weights_targets_optimizer_and_rngs(tmp_path, backend):
    policy = build(tmp_path, {"tau": 0.1, "optimizer": "adam", "lr": 1e-3}, backend=backend)
    batch = transitions()
    policy.learn_on_batch(batch)
    state = policy.get_state()
    fresh = build(tmp_path / "fresh", {"tau": 0.1, "optimizer": "adam", "lr": 1e-3}, backend=backend, seed=7)
    fresh.set_state(state)
    for a, b in ((policy, fresh),):
        for name, value in a.get_target_weights().items():
            np.testing.assert_array_equal(b.get_target_weights()[name], value, err_msg=name)
    stats, fresh_stats = policy.learn_on_batch(batch), fresh.learn_on_batch(batch)
    assert fresh_stats["total_loss"] == stats["total_loss"]
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(fresh.get_weights()[name], value, err_msg=name)


# ----------------------------------------------------------------------------- learning


@pytest.mark.slow
def test_discrete_sac_balances_cartpole_greedy_evaluation_within_budget():
    """configs/sac-discrete-cartpole.yaml, seed 0, torch: greedy evaluation (10 episodes every 1000
    env steps) reaches a return of 150 within 10k env steps. Measured on the loaded 2-core machine:
    greedy 217 at 3k env steps, the whole test 80 s (seeds 1-3: 347, 353, 369 at 4k, 3k, 3k)."""
    result = train_until_stop(SAC, "sac-discrete-cartpole.yaml", "seed=0", "training.evaluation_interval=1")
    assert result["evaluation/episode_return_mean"] >= 150, result
    assert result["timesteps_total"] <= 10_000 + 1_000
