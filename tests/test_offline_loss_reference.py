"""BC and MARWIL losses on both backends against an independent numpy reference.

The reference is MARWIL's loss (Wang et al. 2018, eq. 8) with RLlib's moving-average advantage
norm, written here in float64 from the config docstrings: ``A = R - V(s)``, the norm updated
first (``c^2 += rate * (mean(A^2) - c^2)``), weights ``exp(beta * A / (1e-8 + c))`` held constant,
``-mean(w * (logp + bc_logstd_coeff * mean(log_std))) + vf_coeff * 0.5 * mean(A^2)``; beta 0 and
BC are ``-mean(logp)`` alone. Each case checks the stats, the gradient (finite differences of the
reference) through one plain-SGD step, and the norm the policy keeps. The returns-to-go are
checked against a hand-written loop, truncated and terminated.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.plugins.algorithms.marwil.returns import add_value_targets, returns_to_go
from rlgear.sample_batch import SampleBatch as SB
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    PENDULUM_ACT,
    PENDULUM_OBS,
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

N = 24
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def batch_for(policy, continuous: bool, seed: int = 0) -> SB:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(N, policy.observation_space.size)).astype(np.float32)
    if continuous:
        actions = rng.normal(size=(N, policy.action_space.size)).astype(np.float32)
    else:
        actions = rng.integers(policy.action_space.n, size=N).astype(np.int64)
    # Returns on a scale well away from the values, so the advantages and their weights matter.
    returns = (2.0 + 3.0 * rng.normal(size=N)).astype(np.float32)
    return SB({SB.OBS: obs, SB.ACTIONS: actions, SB.VALUE_TARGETS: returns})


def reference(weights, batch, settings, continuous, norm_before, fixed=None):
    """``(loss, stats, (weights_w, norm_after))``; ``fixed`` holds the advantage weights and norm of
    the step's own weights (constants of the gradient)."""
    dist_inputs, values = actor_critic(weights, batch[SB.OBS])
    logp, _ = logp_and_entropy(dist_inputs, batch[SB.ACTIONS], continuous)
    if settings["bc_logstd_coeff"]:
        logp = logp + settings["bc_logstd_coeff"] * np.asarray(weights["policy/log_std"], np.float64).mean()
    if settings["beta"] == 0.0:
        loss = -logp.mean()
        return loss, {"policy_loss": loss, "total_loss": loss}, None
    advantages = batch[SB.VALUE_TARGETS].astype(np.float64) - values
    sqd = (advantages**2).mean()
    if fixed is None:
        norm = norm_before + settings["rate"] * (sqd - norm_before)
        w = np.exp(settings["beta"] * advantages / (1e-8 + np.sqrt(norm)))
        fixed = (w, norm)
    w, norm = fixed
    policy_loss = -(w * logp).mean()
    vf_loss = 0.5 * sqd
    loss = policy_loss + settings["vf_coeff"] * vf_loss
    stats = {
        "policy_loss": policy_loss,
        "vf_loss": vf_loss,
        "moving_average_sqd_adv_norm": norm,
        "mean_advantage_weight": w.mean(),
        "total_loss": loss,
    }
    return loss, stats, fixed


CASES = {
    "bc-discrete": ("bc", False, {}),
    "bc-continuous": ("bc", True, {}),
    "bc-logstd-coeff": ("bc", True, {"bc_logstd_coeff": 0.3}),
    "marwil-beta0-is-bc": ("marwil", False, {"beta": 0.0}),
    "marwil-discrete": ("marwil", False, {"beta": 1.0, "moving_average_sqd_adv_norm_update_rate": 0.1}),
    "marwil-norm-start": ("marwil", False, {"beta": 0.5, "moving_average_sqd_adv_norm_start": 4.0,
                                            "moving_average_sqd_adv_norm_update_rate": 0.5}),
    "marwil-vf-coeff": ("marwil", False, {"beta": 2.0, "vf_coeff": 0.25,
                                          "moving_average_sqd_adv_norm_update_rate": 0.01}),
    "marwil-continuous-logstd": ("marwil", True, {"beta": 1.0, "bc_logstd_coeff": 0.2,
                                                  "moving_average_sqd_adv_norm_update_rate": 0.2}),
}  # fmt: skip


def settings_of(training) -> dict:
    s = training.loss_settings()
    return {
        "beta": s.beta,
        "vf_coeff": s.vf_coeff,
        "rate": s.moving_average_sqd_adv_norm_update_rate,
        "bc_logstd_coeff": s.bc_logstd_coeff,
        "start": s.moving_average_sqd_adv_norm_start,
    }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_loss_and_update_match_reference(tmp_path, backend, case):
    algorithm, continuous, training = CASES[case]
    config = resolve(
        tmp_path, algorithm, {"optimizer": "sgd", "lr": 0.05, "grad_clip": None, **training},
        env="Pendulum-v1" if continuous else "CartPole-v1", backend=backend,
    )  # fmt: skip
    obs_space, act_space = (PENDULUM_OBS, PENDULUM_ACT) if continuous else (CARTPOLE_OBS, CARTPOLE_ACT)
    policy = make_policy(config, backend, obs_space, act_space)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))
    settings = settings_of(config.training)
    batch = batch_for(policy, continuous)
    weights = policy.get_weights()
    # two steps: the second starts from the norm the first left (the moving average carries over)
    norm = settings["start"]
    for step in range(2):
        weights = policy.get_weights()
        _, expected, fixed = reference(weights, batch, settings, continuous, norm)
        grads = finite_difference_gradient(
            lambda w, f=fixed, n=norm: reference(w, batch, settings, continuous, n, f)[0], weights
        )
        stats, update = sgd_step(policy, batch)
        for key, value in expected.items():
            assert stats[key] == pytest.approx(value, rel=1e-4, abs=1e-5), (step, key)
        if settings["beta"] == 0.0:
            assert "vf_loss" not in stats and "moving_average_sqd_adv_norm" not in stats
        assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
        assert_update_is_sgd_on(update, grads, config.training.lr, None)
        if fixed is not None:
            norm = fixed[1]
            assert float(policy.moving_average_sqd_adv_norm) == pytest.approx(norm, rel=1e-5)
    if settings["beta"] != 0.0 and settings["rate"] > 0:
        assert norm != pytest.approx(settings["start"])  # the moving average moved


@pytest.mark.parametrize("backend", BACKENDS)
def test_advantage_norm_rides_in_the_policy_state(tmp_path, backend):
    training = {"beta": 1.0, "moving_average_sqd_adv_norm_update_rate": 0.5}
    config = resolve(tmp_path, "marwil", training, backend=backend)
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    policy.learn_on_batch(batch_for(policy, False))
    moved = float(policy.moving_average_sqd_adv_norm)
    assert moved != pytest.approx(100.0)
    fresh = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    fresh.set_state(policy.get_state())
    assert float(fresh.moving_average_sqd_adv_norm) == pytest.approx(moved)


def test_bc_logstd_coeff_refused_for_discrete_actions(tmp_path):
    config = resolve(tmp_path, "bc", {"bc_logstd_coeff": 0.1})
    with pytest.raises(ValueError, match="bc_logstd_coeff"):
        make_policy(config, "torch", CARTPOLE_OBS, CARTPOLE_ACT)


def loop_returns(rewards, gamma, tail):
    out, running = [], tail
    for reward in reversed(rewards):
        running = reward + gamma * running
        out.append(running)
    return np.array(out[::-1])


def test_terminated_episode_returns_do_not_bootstrap():
    rewards = np.array([1.0, 0.5, -2.0, 3.0], np.float32)
    got = returns_to_go(rewards, terminated=True, bootstrap_value=100.0, gamma=0.9)
    np.testing.assert_allclose(got, loop_returns(rewards, 0.9, 0.0), rtol=1e-6)


def test_truncated_episode_bootstraps_from_last_value():
    rewards = np.array([1.0, 0.5, -2.0, 3.0], np.float32)
    got = returns_to_go(rewards, terminated=False, bootstrap_value=7.0, gamma=0.9)
    np.testing.assert_allclose(got, loop_returns(rewards, 0.9, 7.0), rtol=1e-6)
    assert got[-1] == pytest.approx(3.0 + 0.9 * 7.0)


def test_value_targets_ask_the_value_only_for_a_truncated_episode():
    asked = []

    def value_of(obs):
        asked.append(obs)
        return 5.0

    postprocess = add_value_targets(0.5, value_of)
    rows = SB({SB.OBS: np.zeros((2, 1), np.float32), SB.REWARDS: np.array([1.0, 1.0], np.float32),
               "terminateds": np.array([False, True]), "truncateds": np.array([False, False])})  # fmt: skip
    np.testing.assert_allclose(postprocess(rows, np.ones((1, 1)))[SB.VALUE_TARGETS], [1.5, 1.0])
    assert asked == []
    rows["terminateds"] = np.array([False, False])
    rows["truncateds"] = np.array([False, True])
    np.testing.assert_allclose(
        postprocess(rows, np.ones((1, 1)))[SB.VALUE_TARGETS], [1.5 + 0.25 * 5, 1.0 + 0.5 * 5]
    )
    assert len(asked) == 1


@pytest.mark.parametrize("gamma", [0.5, 0.9])
def test_marwil_rows_carry_returns_to_go_of_training_gamma(tmp_path, monkeypatch, gamma):
    """The trainer's rows hold the returns-to-go of ``training.gamma``: CartPole pays 1 a step and
    every episode here terminates, so a row k steps before the end holds (1 - gamma^k) / (1 - gamma)."""
    from rlgear.discovery import registry
    from tests.offline_data import record_cartpole, use_data

    use_data(monkeypatch, record_cartpole(lambda obs, rng: int(rng.integers(2)), episodes=10, seed=0))
    raw = {
        "algorithm": "marwil",
        "seed": 3,
        "offline": {"input": "tests/in-memory-v0"},
        "training": {"gamma": gamma, "train_batch_size": 64, "ope_interval": 0},
        "model": {"hidden_sizes": [8]},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    trainer = registry.load_algorithm("marwil")(raw)
    try:
        targets = np.asarray(next(trainer.batches)[SB.VALUE_TARGETS], np.float64)
    finally:
        trainer.stop()
    allowed = (1 - gamma ** np.arange(1, 501)) / (1 - gamma)
    steps_to_end = np.abs(targets[:, None] - allowed[None]).argmin(axis=1) + 1
    np.testing.assert_allclose(targets, allowed[steps_to_end - 1], rtol=1e-5)
    assert len(set(steps_to_end[targets < 0.99 / (1 - gamma)])) > 1  # several distances to the end
