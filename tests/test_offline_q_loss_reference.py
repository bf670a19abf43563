"""Discrete CQL, CQL (continuous) and IQL losses on both backends against independent numpy references.

Each reference is written in float64 from the papers and the config docstrings, on the
framework-neutral weights (the network references are DQN's, SAC's and the catalog model's own
test references):

* discrete CQL (Kumar et al. 2020, CQL(H) for discrete actions): DQN's TD loss plus
  ``min_q_weight * mean(logsumexp_a Q(s, a) - Q(s, a_data))``;
* CQL on SAC (appendix F): SAC's losses, and for each critic ``k`` the penalty
  ``mean(T logsumexp_i(x_i / T) - Q_k(s, a_data))`` over ``n`` uniform actions (less the log of their
  density ``0.5^|A|``), ``n`` actor samples at ``s'`` and ``n`` at ``s`` (less their log-probability),
  all valued at ``s``; the uniform actions are ``erf(z / sqrt 2)`` of the policy's normal draws;
* IQL (Kostrikov et al. 2021): expectile value loss on ``u = min_k Q'_k(s, a) - V(s)``, TD critics on
  ``r + discount V(s')``, actor ``-mean(min(exp(beta u), max_weight) log pi(a|s))``.

Each case takes one plain-SGD step and compares the stats and every weight's update with ``lr x``
the finite-difference gradient of the loss that reaches it, for every option that changes the math.
The last section checks what the losses take as given from the trainer: the ``discounts`` column
(``training.gamma``, 0 after a terminal, gamma after a truncation) and discrete CQL's target
updates (every ``target_network_update_freq`` steps, by ``tau``).
"""

from __future__ import annotations

from math import erf

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    PENDULUM_ACT,
    PENDULUM_OBS,
    actor_critic,
    assert_update_is_sgd_on,
    dense,
    finite_difference_gradient,
    global_norm,
    logp_and_entropy,
    make_policy,
    mlp_body,
    random_weights,
    resolve,
    sgd_step,
)
from tests.test_dqn_loss_reference import q_values
from tests.test_dqn_loss_reference import reference as dqn_reference
from tests.test_offpolicy_loss_reference import (
    critic_values,
    grouped_gradient,
    sac_reference,
    scaled,
    squashed_gaussian,
)

N = 24
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def transitions(continuous: bool, seed: int = 0) -> SB:
    rng = np.random.default_rng(seed)
    obs_dim = 3 if continuous else 4
    if continuous:
        actions = rng.uniform(-2.0, 2.0, size=(N, 1)).astype(np.float32)
    else:
        actions = rng.integers(2, size=N).astype(np.int64)
    return SB({
        SB.OBS: rng.normal(size=(N, obs_dim)).astype(np.float32),
        SB.ACTIONS: actions,
        SB.REWARDS: (2.0 * rng.normal(size=N)).astype(np.float32),
        NEXT_OBS: rng.normal(size=(N, obs_dim)).astype(np.float32),
        SB.DISCOUNTS: (0.97 * (rng.random(N) > 0.25)).astype(np.float32),  # gamma, 0 after a terminal
    })  # fmt: skip


def build(tmp_path, algorithm, backend, training, continuous, lr=0.05):
    base = {"optimizer": "sgd", "lr": lr, "grad_clip": None, "train_batch_size": N}
    config = resolve(
        tmp_path, algorithm, {**base, **training}, {"activation": "relu", "hidden_sizes": [8, 6]},
        env="Pendulum-v1" if continuous else "CartPole-v1", backend=backend,
    )  # fmt: skip
    spaces = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    policy = make_policy(config, backend, *spaces)
    if "log_alpha" in policy.get_weights():  # cql: the temperature starts at training.initial_alpha
        initial = np.log(config.training.initial_alpha)
        assert float(policy.get_weights()["log_alpha"][0]) == pytest.approx(initial, rel=1e-6, abs=1e-7)
    weights = random_weights(policy.get_weights(), seed=1, gain=1.5)
    if "log_alpha" in weights:
        weights["log_alpha"] = np.array([np.log(training.get("initial_alpha", 0.7))], np.float32)
    policy.set_weights(weights)
    policy.set_target_weights(random_weights(policy.get_target_weights(), seed=2, gain=1.5))
    return policy


def check_grouped_step(policy, batch, reference, tau):
    """One step against ``reference(weights, target) -> (losses by weight-name prefix, stats)``; the
    targets then moved by ``tau``."""
    lr = policy.config.training.lr
    weights, target = policy.get_weights(), policy.get_target_weights()
    stats, update = sgd_step(policy, batch)
    _, expected = reference(weights, target)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    grads = grouped_gradient(lambda w: reference(w, target)[0], weights)
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    for name, grad in grads.items():
        np.testing.assert_allclose(
            update[name] / lr, grad, rtol=2e-3, atol=2e-5, err_msg=f"gradient of {name}"
        )
    after, new_target = policy.get_weights(), policy.get_target_weights()
    for name, value in new_target.items():
        expected_target = (1 - tau) * target[name].astype(np.float64) + tau * after[name]
        np.testing.assert_allclose(value, expected_target, rtol=1e-5, atol=1e-6, err_msg=f"target {name}")
    return stats


# ----------------------------------------------------------------------------- discrete CQL


def discrete_cql_reference(weights, target, batch, training):
    td_loss, stats, _ = dqn_reference(weights, target, batch, training)
    q = q_values(weights, batch[SB.OBS])
    q_taken = q[np.arange(len(q)), batch[SB.ACTIONS]]
    if SB.ACTION_MASK in batch:  # the soft maximum runs over the allowed actions only
        q = np.where(batch[SB.ACTION_MASK], q, -np.inf)
    high = q.max(axis=1)
    penalty = (high + np.log(np.exp(q - high[:, None]).sum(axis=1)) - q_taken).mean()
    loss = td_loss + training.min_q_weight * penalty
    return loss, {**stats, "td_loss": td_loss, "cql_penalty": penalty, "total_loss": loss}


DISCRETE_CQL_CASES = {
    "double-dueling-huber": {"min_q_weight": 1.0, "huber_delta": 0.7},
    "plain-max-mse": {"min_q_weight": 2.5, "double_q": False, "dueling": False, "td_error_loss_fn": "mse"},
    "no-penalty-is-dqn": {"min_q_weight": 0.0},
    "action-masks": {"min_q_weight": 1.5, "huber_delta": 0.7},  # the batch carries action masks
}


def with_action_masks(batch: SB, seed: int = 3) -> SB:
    """``batch`` plus ``action_mask`` (the data's action always allowed, the other in about half the
    rows) and ``next_action_mask`` (one action or both allowed at next_obs)."""
    rng = np.random.default_rng(seed)
    mask = rng.random((N, 2)) < 0.5
    mask[np.arange(N), batch[SB.ACTIONS]] = True
    next_mask = rng.random((N, 2)) < 0.5
    next_mask[np.arange(N), rng.integers(2, size=N)] = True
    return SB({**batch, SB.ACTION_MASK: mask, SB.NEXT_ACTION_MASK: next_mask})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(DISCRETE_CQL_CASES))
def test_discrete_cql_loss_and_update_match_the_numpy_reference(tmp_path, backend, case):
    policy = build(tmp_path, "discrete_cql", backend, DISCRETE_CQL_CASES[case], continuous=False, lr=0.3)
    training = policy.config.training
    batch = transitions(continuous=False)
    if case == "action-masks":
        batch = with_action_masks(batch)
        assert not batch[SB.ACTION_MASK].all() and not batch[SB.NEXT_ACTION_MASK].all()
    weights, target = policy.get_weights(), policy.get_target_weights()
    _, expected = discrete_cql_reference(weights, target, batch, training)
    grads = finite_difference_gradient(
        lambda w: discrete_cql_reference(w, target, batch, training)[0], weights
    )
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    assert_update_is_sgd_on(update, grads, training.lr)
    assert expected["cql_penalty"] > 0  # logsumexp exceeds any one action's Q


# ----------------------------------------------------------------------------- CQL on SAC


def cql_penalty(weights, batch, training, noise):
    """``(sum over critics of the penalty, mean soft maximum)`` for the draws ``noise`` ``[B, 3n, |A|]``."""
    n, dims = training.num_sampled_actions, np.shape(noise)[2]
    noise = np.asarray(noise, np.float64)
    uniform = np.vectorize(erf)(noise[:, :n] / np.sqrt(2.0))
    obs, next_obs = np.asarray(batch[SB.OBS], np.float64), np.asarray(batch[NEXT_OBS], np.float64)
    members = []
    for i in range(N):
        at_s = np.repeat(obs[i : i + 1], n, axis=0)
        at_next = np.repeat(next_obs[i : i + 1], n, axis=0)
        a_s, logp_s = squashed_gaussian(weights, at_s, noise[i, n : 2 * n])
        a_next, logp_next = squashed_gaussian(weights, at_next, noise[i, 2 * n :])
        x = np.concatenate([
            critic_values(weights, at_s, uniform[i]) - dims * np.log(0.5),
            critic_values(weights, at_s, a_next) - logp_next,
            critic_values(weights, at_s, a_s) - logp_s,
        ], axis=1) / training.temperature  # fmt: skip
        high = x.max(axis=1, keepdims=True)
        members.append(training.temperature * (high[:, 0] + np.log(np.exp(x - high).sum(axis=1))))
    soft_max = np.stack(members, axis=1)  # [K, B]
    q_data = critic_values(weights, obs, scaled(batch[SB.ACTIONS]))
    return (soft_max - q_data).mean(axis=1).sum(), soft_max.mean()


def cql_reference(weights, target, batch, training, noises, actor_at_step):
    """SAC's losses by parameter group with the penalty added to the critics'; the penalty's actor
    samples come from the step's actor (``actor_at_step``) and are constants: it reaches only ``q/``."""
    noise, next_noise, penalty_noise = noises
    losses, stats, _ = sac_reference(weights, target, batch, training, noise, next_noise)
    critics = {name: value for name, value in weights.items() if name.startswith("q/")}
    penalty, soft_max = cql_penalty({**actor_at_step, **critics}, batch, training, penalty_noise)
    losses["q/"] = losses["q/"] + training.min_q_weight * penalty
    stats = {**stats, "cql_penalty": penalty, "cql_logsumexp_q": soft_max, "total_loss": sum(losses.values())}
    return losses, stats


CQL_CASES = {
    "tuned-alpha": {"min_q_weight": 1.0, "num_sampled_actions": 2},
    "weight-temperature-samples": {"min_q_weight": 3.0, "temperature": 0.5, "num_sampled_actions": 3},
    "fixed-alpha": {"min_q_weight": 0.5, "num_sampled_actions": 2, "tune_alpha": False, "initial_alpha": 0.3},
    "target-entropy": {
        "min_q_weight": 1.0,
        "num_sampled_actions": 2,
        "target_entropy": 0.5,
        "initial_alpha": 1.3,
    },
    "no-penalty-is-sac": {"min_q_weight": 0.0, "num_sampled_actions": 2},
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CQL_CASES))
def test_cql_losses_and_update_match_the_numpy_reference(tmp_path, backend, case):
    training = {"tau": 0.1, **CQL_CASES[case]}
    policy = build(tmp_path, "cql", backend, training, continuous=True)
    batch = transitions(continuous=True)
    config = policy.config.training
    actor_at_step = {k: v for k, v in policy.get_weights().items() if not k.startswith("q/")}

    def reference(weights, target):
        noises = [np.asarray(t.numpy()) for t in policy.last_noise]
        return cql_reference(weights, target, batch, config, noises, actor_at_step)

    stats = check_grouped_step(policy, batch, reference, tau=0.1)
    assert stats["cql_penalty"] > 0


# ----------------------------------------------------------------------------- IQL


def iql_critics(weights, obs, actions, continuous):
    """``[2, B]`` Q of the dataset's actions: continuous critics read ``[s, a]``, discrete ones output ``Q(s, .)``."""
    if continuous:
        return critic_values(weights, obs, np.asarray(actions, np.float64).reshape(len(obs), -1))
    out = []
    for k in range(np.shape(weights["q/output/kernel"])[0]):
        member = {name: np.asarray(value)[k] for name, value in weights.items() if name.startswith("q/")}
        q_all = dense(member, "q/output", mlp_body(member, "q", np.asarray(obs, np.float64), "relu"))
        out.append(q_all[np.arange(len(obs)), actions])
    return np.stack(out)


def iql_reference(weights, target, batch, training, continuous):
    obs, actions = batch[SB.OBS], batch[SB.ACTIONS]
    dist_inputs, values = actor_critic(weights, obs, activation="relu")
    target_q = iql_critics(target, obs, actions, continuous).min(axis=0)
    u = target_q - values
    value_loss = (np.abs(training.expectile - (u < 0)) * u**2).mean()
    _, next_values = actor_critic(
        VALUE_AT_STEP[0], batch[NEXT_OBS], activation="relu"
    )  # no gradient: the step's weights
    targets = batch[SB.REWARDS].astype(np.float64) + batch[SB.DISCOUNTS].astype(np.float64) * next_values
    q = iql_critics(weights, obs, actions, continuous)
    critic_loss = 0.5 * ((q - targets) ** 2).mean(axis=1).sum()
    _, fixed_values = actor_critic(VALUE_AT_STEP[0], obs, activation="relu")
    w = np.minimum(np.exp(training.beta * (target_q - fixed_values)), training.max_weight)
    logp, _ = logp_and_entropy(dist_inputs, actions, continuous)
    actor_loss = -(w * logp).mean()
    losses = {"value/": value_loss, "q/": critic_loss, "policy/": actor_loss}
    stats = {
        "value_loss": value_loss, "critic_loss": critic_loss, "actor_loss": actor_loss,
        "mean_q": q.mean(), "mean_v": values.mean(), "mean_target_q": targets.mean(),
        "mean_advantage_weight": w.mean(), "total_loss": value_loss + critic_loss + actor_loss,
    }  # fmt: skip
    return losses, stats


VALUE_AT_STEP: list[dict] = []  # the step's weights: V(s') and the advantage weights are constants

IQL_CASES = {
    "discrete": (False, {}),
    "discrete-expectile-beta": (False, {"expectile": 0.9, "beta": 0.5}),
    "discrete-weight-clipped": (False, {"beta": 10.0, "max_weight": 2.0}),
    "continuous": (True, {}),
    "continuous-expectile-beta-clip": (True, {"expectile": 0.6, "beta": 8.0, "max_weight": 3.0}),
    "continuous-beta0-is-bc": (True, {"beta": 0.0, "expectile": 0.8}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(IQL_CASES))
def test_iql_losses_and_update_match_the_numpy_reference(tmp_path, backend, case):
    continuous, training = IQL_CASES[case]
    policy = build(tmp_path, "iql", backend, {"tau": 0.1, **training}, continuous)
    batch = transitions(continuous)
    config = policy.config.training
    VALUE_AT_STEP[:] = [policy.get_weights()]
    stats = check_grouped_step(
        policy, batch, lambda w, t: iql_reference(w, t, batch, config, continuous), tau=0.1
    )
    if config.max_weight < 5:
        assert stats["mean_advantage_weight"] < config.max_weight
    if config.beta == 0:  # every weight exp(0) = 1: the actor's loss is behaviour cloning's
        assert stats["mean_advantage_weight"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- from the trainer
# What the losses above take as given: the ``discounts`` column (``training.gamma``, 0 after a
# terminal) and, for discrete CQL, when and how far the target network moves.


def cut_episodes(data, length=6):
    """``data`` with each episode cut to ``length`` steps, ending terminated (even episodes) or
    truncated (odd ones), so that minibatches hold both kinds of last rows."""
    from tests.offline_data import Episode, InMemoryData

    episodes = []
    for index, e in enumerate(data.episodes()):
        last, none = np.arange(length) == length - 1, np.zeros(length, bool)
        terminated, truncated = (last, none) if index % 2 == 0 else (none, last)
        episodes.append(Episode(e.observations[: length + 1], e.actions[:length], e.rewards[:length],
                                terminated, truncated, None, index))  # fmt: skip
    return InMemoryData(episodes, data.observation_space, data.action_space, data.env_id)


def offline_trainer(tmp_path, monkeypatch, algorithm, data, backend="torch", **training):
    from rlgear.discovery import registry
    from tests.offline_data import use_data

    use_data(monkeypatch, data)
    raw = {
        "algorithm": algorithm,
        "backend": backend,
        "seed": 3,
        "offline": {"input": "tests/in-memory-v0"},
        "training": {"train_batch_size": 64, "ope_interval": 0, **training},
        "model": {"hidden_sizes": [8]},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    return registry.load_algorithm(algorithm)(raw)


@pytest.mark.parametrize("algorithm", ["discrete_cql", "iql", "cql"])
def test_transition_rows_carry_gamma_and_zero_after_a_terminal(tmp_path, monkeypatch, algorithm):
    from tests.offline_data import record_cartpole, record_pendulum

    if algorithm == "cql":
        data = record_pendulum(lambda obs, rng: float(rng.uniform(-2, 2)), episodes=8, seed=0)
    else:
        data = record_cartpole(lambda obs, rng: int(rng.integers(2)), episodes=8, seed=0)
    trainer = offline_trainer(tmp_path, monkeypatch, algorithm, cut_episodes(data), gamma=0.9)
    try:
        rows = next(trainer.batches)
    finally:
        trainer.stop()
    terminated, truncated = np.asarray(rows["terminateds"]), np.asarray(rows["truncateds"])
    assert terminated.any() and truncated.any()  # both ends drawn (48 rows, 8 of them last ones)
    np.testing.assert_allclose(rows[SB.DISCOUNTS], np.where(terminated, 0.0, 0.9), rtol=0, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("freq", "tau"), [(3, 0.25), (2, 1.0)])
def test_discrete_cql_moves_its_target_every_freq_steps_by_tau(tmp_path, monkeypatch, backend, freq, tau):
    from tests.offline_data import record_cartpole

    data = record_cartpole(lambda obs, rng: int(rng.integers(2)), episodes=5, seed=0)
    trainer = offline_trainer(tmp_path, monkeypatch, "discrete_cql", data, backend,
                              num_gradient_steps_per_iteration=7, target_network_update_freq=freq,
                              tau=tau)  # fmt: skip
    policy = trainer.learner.policy
    moves, update_target = [], policy.update_target

    def recorded(rate):
        before = policy.get_target_weights()
        update_target(rate)
        moves.append(
            (trainer.num_gradient_steps, rate, before, policy.get_weights(), policy.get_target_weights())
        )

    policy.update_target = recorded
    try:
        result = trainer.train()
    finally:
        trainer.stop()
    assert [step for step, *_ in moves] == list(range(freq, 8, freq))
    assert result["learner/num_target_updates"] == len(moves)
    for _, rate, before, online, after in moves:
        assert rate == tau
        for name, value in after.items():
            expected = (1 - tau) * before[name].astype(np.float64) + tau * online[name]
            np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6, err_msg=name)
