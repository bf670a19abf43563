"""Tests of the PQN plugin: acting (epsilon-greedy, bootstrap values), the epsilon schedule, the training
step, checkpoints on both backends and across them, and config errors.

The Q(lambda) targets are checked in test_pqn_returns.py, the network and loss against numpy in
test_pqn_loss_reference.py, learning in test_learning_pqn.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlgear
import rlgear.inference
from rlgear import config as config_mod
from rlgear.errors import ConfigError, UnsupportedError
from rlgear.plugins.algorithms.pqn import PQN, PQNConfig
from rlgear.plugins.algorithms.pqn.acting import epsilon_at
from rlgear.policy import PolicyState
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType, TimeStep
from tests.conftest import BACKENDS
from tests.numpy_reference import CARTPOLE_ACT, CARTPOLE_OBS, make_policy

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def raw_config(tmp_path, training=None, model=None, env="CartPole-v1", backend="torch", **sections):
    """A tiny PQN run: 4 envs, 32-step training batches, a 16-unit Q-network."""
    config = {
        "algorithm": "pqn",
        "backend": backend,
        "seed": 0,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 4},
        "model": {"hidden_sizes": [16], "activation": "relu", **(model or {})},
        "training": {
            "train_batch_size": 32,
            "sgd_minibatch_size": 16,
            "num_sgd_iter": 2,
            "epsilon_timesteps": 100,
            **(training or {}),
        },
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    config.update(sections)
    return config


def resolve(raw):
    return config_mod.resolve(raw, training_class=PQNConfig)


@pytest.fixture
def make_trainer(tmp_path):
    trainers = []

    def make(raw):
        trainer = PQN(resolve(raw), logdir=tmp_path / f"run{len(trainers)}")
        trainers.append(trainer)
        return trainer

    yield make
    for trainer in trainers:
        trainer.stop()


def timestep_of(observations, mask=None):
    n = len(observations)
    return TimeStep(
        step_type=np.full(n, StepType.MID, np.int32),
        reward=np.zeros(n, np.float32),
        discount=np.ones(n, np.float32),
        observation=np.asarray(observations, np.float32),
        prev_action=np.zeros(n, np.int64),
        env_id=np.arange(n),
        action_mask=mask,
    )


def policy_for(tmp_path, backend, **kwargs):
    return make_policy(
        resolve(raw_config(tmp_path, backend=backend, **kwargs)), backend, CARTPOLE_OBS, CARTPOLE_ACT
    )


# ----------------------------------------------------------------------------- acting


@pytest.mark.parametrize("backend", BACKENDS)
def test_acting_records_max_q_over_the_allowed_actions_and_is_greedy_without_exploration(tmp_path, backend):
    policy = policy_for(tmp_path, backend)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    q = policy.action_distribution_inputs(obs)
    actions, _, extras = policy.compute_actions(timestep_of(obs), explore=False)
    np.testing.assert_array_equal(actions, q.argmax(axis=1))
    np.testing.assert_allclose(extras[SB.VF_PREDS], q.max(axis=1), rtol=1e-6)
    assert extras[SB.VF_PREDS].dtype == np.float32
    best = q.argmax(axis=1)
    mask = np.ones((64, 2), bool)
    mask[np.arange(0, 64, 2), best[::2]] = False  # the even rows may not take their best action
    actions, _, extras = policy.compute_actions(timestep_of(obs, mask), explore=False)
    np.testing.assert_array_equal(actions[::2], 1 - best[::2])
    np.testing.assert_allclose(extras[SB.VF_PREDS][::2], q[::2].min(axis=1), rtol=1e-6)
    np.testing.assert_allclose(extras[SB.VF_PREDS][1::2], q[1::2].max(axis=1), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_exploring_takes_random_actions_at_rate_epsilon(tmp_path, backend):
    policy = policy_for(tmp_path, backend, training={"epsilon_initial": 1.0, "epsilon_final": 0.3})
    obs = np.random.default_rng(1).normal(size=(4000, 4)).astype(np.float32)
    greedy = policy.action_distribution_inputs(obs).argmax(axis=1)
    policy.set_global_timestep(1000)  # past epsilon_timesteps: epsilon_final
    actions, _, _ = policy.compute_actions(timestep_of(obs))
    # a random action is the greedy one half the time: 0.3 / 2 of the rows differ
    assert np.mean(actions != greedy) == pytest.approx(0.15, abs=0.03)


def test_epsilon_falls_linearly_then_stays_at_its_final_value():
    training = PQNConfig(epsilon_initial=1.0, epsilon_final=0.05, epsilon_timesteps=1000)
    assert epsilon_at(training, 0) == 1.0
    assert epsilon_at(training, 500) == pytest.approx(0.525)
    assert epsilon_at(training, 1000) == pytest.approx(0.05)
    assert epsilon_at(training, 10**6) == pytest.approx(0.05)
    assert epsilon_at(PQNConfig(epsilon_final=0.1, epsilon_timesteps=0), 0) == pytest.approx(0.1)


def test_trainer_sets_epsilon_on_the_acting_policies_and_reports_it(make_trainer, tmp_path):
    trainer = make_trainer(raw_config(tmp_path, training={"epsilon_timesteps": 64, "epsilon_final": 0.2}))
    seen = []
    trainer.workers.local_worker.policy_map["default"].compute_actions = _spy(
        trainer.workers.local_worker.policy_map["default"], seen
    )
    results = [trainer.train() for _ in range(3)]
    training = trainer.config.training
    for result in results:  # reported after each step: the epsilon the next sampling acts with
        assert result["learner/epsilon"] == pytest.approx(epsilon_at(training, result["timesteps_total"]))
    assert results[0]["learner/epsilon"] < 1.0 and results[2]["learner/epsilon"] == pytest.approx(0.2)
    # the workers' policy acted at 1.0 first, and during the last sampling at the second step's epsilon
    assert seen[0] == 1.0
    assert seen[-1] == pytest.approx(results[1]["learner/epsilon"]) and seen[-1] < 1.0


def _spy(policy, seen):
    original = policy.compute_actions

    def compute_actions(timestep, state=None, explore=True):
        seen.append(policy.epsilon())
        return original(timestep, state, explore)

    return compute_actions


def test_training_step_learns_on_q_lambda_targets_of_the_sampled_rows(make_trainer, tmp_path):
    trainer = make_trainer(raw_config(tmp_path))
    before = trainer.policy.get_weights()
    result = trainer.train()
    assert result["timesteps_total"] == 32
    # 2 epochs of 16-row minibatches over the rows (32 less the LAST rows, if any)
    assert trainer.policy.num_grad_updates in (3, 4)
    for key in ("learner/mean_q", "learner/mean_target_q", "learner/mean_td_error", "learner/total_loss"):
        assert np.isfinite(result[key]), key
    after = trainer.policy.get_weights()
    assert any(not np.array_equal(before[k], after[k]) for k in before)
    assert not hasattr(trainer, "replay_buffer") and not hasattr(trainer.policy, "target_model")


# ----------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_state_round_trips_weights_optimizer_counters_and_the_acting_rng(tmp_path, backend):
    policy = policy_for(tmp_path, backend, training={"optimizer": "adam"})
    obs = np.random.default_rng(2).normal(size=(8, 4)).astype(np.float32)
    rows = SB(
        {
            SB.OBS: obs,
            SB.ACTIONS: np.arange(8, dtype=np.int64) % 2,
            SB.VALUE_TARGETS: np.linspace(-1, 1, 8, dtype=np.float32),
        }
    )
    policy.learn_on_batch(rows)
    policy.compute_actions(timestep_of(obs))
    state = policy.get_state()
    assert "acting_rng" in state.meta

    restored = policy_for(tmp_path / "other", backend, training={"optimizer": "adam"}, seed=9)
    restored.set_state(PolicyState(dict(state.arrays), dict(state.meta)))
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(restored.get_weights()[name], value, err_msg=name)
    assert restored.num_grad_updates == policy.num_grad_updates
    # the same optimizer state and the same generators: the next step and the next actions are equal
    policy.learn_on_batch(rows)
    restored.learn_on_batch(rows)
    for name, value in policy.get_weights().items():
        np.testing.assert_allclose(restored.get_weights()[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    ours = policy.compute_actions(timestep_of(obs))[0]
    theirs = restored.compute_actions(timestep_of(obs))[0]
    np.testing.assert_array_equal(ours, theirs)


def test_checkpoint_round_trip_restores_policy_and_counters_and_training_goes_on(make_trainer, tmp_path):
    raw = raw_config(tmp_path)
    trainer = make_trainer(raw)
    for _ in range(2):
        trainer.train()
    path = trainer.save()
    restored = make_trainer(raw)
    restored.restore(path)
    assert (restored.iteration, restored.timesteps_total) == (trainer.iteration, trainer.timesteps_total)
    assert restored.policy.num_grad_updates == trainer.policy.num_grad_updates
    assert restored.policy.global_timestep == trainer.policy.global_timestep
    assert restored.policy.epsilon() == trainer.policy.epsilon()
    for name, value in trainer.policy.get_weights().items():
        np.testing.assert_array_equal(restored.policy.get_weights()[name], value, err_msg=name)
    restored.train()
    assert restored.timesteps_total == trainer.timesteps_total + 32


def test_a_torch_checkpoint_acts_alike_on_tf_and_in_the_numpy_runtime(make_trainer, tmp_path):
    pytest.importorskip("tensorflow")
    trainer = make_trainer(raw_config(tmp_path, model={"hidden_sizes": [16, 8]}))
    trainer.train()
    path = trainer.save()
    obs = np.random.default_rng(3).normal(size=(32, 4)).astype(np.float32)
    expected = trainer.policy.action_distribution_inputs(obs).argmax(axis=1)
    on_tf = rlgear.load(path, ["backend=tf"])
    assert type(on_tf.policy).__module__ == "rlgear.plugins.algorithms.pqn.tf_policy"
    np.testing.assert_array_equal(on_tf.compute_actions(obs), expected)
    runtime = rlgear.inference.load(path)
    np.testing.assert_array_equal(runtime.compute_actions(obs), expected)


# ----------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("q_lambda", 1.5, "training.q_lambda"),
        ("q_lambda", -0.1, "training.q_lambda"),
        ("epsilon_final", 1.5, "training.epsilon_final"),
        ("epsilon_initial", -1.0, "training.epsilon_initial"),
        ("epsilon_timesteps", -1, "training.epsilon_timesteps"),
        ("sgd_minibatch_size", 0, "training.sgd_minibatch_size"),
        ("num_sgd_iter", 0, "training.num_sgd_iter"),
    ],
)
def test_config_values_out_of_range_are_errors_naming_the_key(tmp_path, key, value, message):
    with pytest.raises(ConfigError, match=message):
        resolve(raw_config(tmp_path, training={key: value}))


def test_layer_norm_with_a_custom_model_is_an_error_naming_the_key(tmp_path):
    raw = raw_config(tmp_path, model={"custom": "custom_models:TinyActorCritic"})
    with pytest.raises(ConfigError, match=r"training\.layer_norm"):
        PQN(resolve(raw))


def test_unsupported_continuous_actions_are_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="continuous"):
        PQN(resolve(raw_config(tmp_path, env="Pendulum-v1")))


def test_recurrent_models_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.lstm"):
        PQN(resolve(raw_config(tmp_path, model={"lstm": True})))


def test_pqn_declares_discrete_actions_on_both_backends():
    assert PQN.capabilities() == {
        "discrete": True,
        "continuous": False,
        "multi_discrete": False,
        "composite": False,
        "backends": ["tf", "torch"],
        "multi_agent": False,
        "recurrent": False,
        "league": False,
        "relational": False,
    }
