"""Tests of qrdqn beyond its loss (test_qrdqn_loss_reference.py): config errors, acting on the
quantiles' mean, checkpoints on both backends, a checkpoint moving between backends, reset_config.

The learning tests are in test_learning_qrdqn.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.errors import ConfigError
from rlgear.plugins.algorithms.dqn.qrdqn import QRDQN
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType, TimeStep
from tests.conftest import BACKENDS
from tests.numpy_reference import CARTPOLE_ACT, CARTPOLE_OBS, make_policy, random_weights, resolve
from tests.test_rainbow_loss_reference import atom_logits

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def raw_config(tmp_path, backend="torch", **training):
    """A tiny qrdqn run: 2 envs, 4-step fragments, learning after 16 env steps, 5 quantiles."""
    return {
        "algorithm": "qrdqn",
        "backend": backend,
        "seed": 0,
        "env": {"name": "CartPole-v1", "vectorization": "sync"},
        "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 4},
        "model": {"hidden_sizes": [16], "activation": "relu"},
        "training": {
            "num_quantiles": 5,
            "env_steps_per_training_step": 8,
            "learning_starts": 16,
            "train_batch_size": 8,
            "training_intensity": 2.0,
            "buffer_size": 200,
            "target_network_update_freq": 30,
            "epsilon_timesteps": 100,
            **training,
        },
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }


def timestep(obs):
    n = len(obs)
    return TimeStep(
        np.full(n, StepType.MID, np.int32), np.zeros(n, np.float32), np.ones(n, np.float32),
        obs, np.zeros(n, np.int64), np.arange(n, dtype=np.int32),
    )  # fmt: skip


# ----------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    ("training", "key", "message"),
    [
        ({"num_atoms": 51}, "training.num_atoms", "qrdqn learns num_quantiles quantiles, not C51's atoms"),
        ({"num_quantiles": 0}, "training.num_quantiles", "expected a positive integer"),
        ({"kappa": -1.0}, "training.kappa", "expected 0 .* or a positive number"),
        ({"v_max": 100.0}, "training.v_max", "unknown key"),  # C51's support: no meaning for quantiles
        ({"huber_delta": 2.0}, "training.huber_delta", "unknown key; did you mean 'kappa'|unknown key"),
        ({"td_error_loss_fn": "mse"}, "training.td_error_loss_fn", "unknown key"),
        ({"tau": 0.0}, "training.tau", "expected a number in"),  # DQN's own checks still run
    ],
)
def test_config_errors_name_the_key_in_one_line(tmp_path, training, key, message):
    with pytest.raises(ConfigError, match=rf"{key}: .*({message})") as raised:
        config_mod.resolve(raw_config(tmp_path, **training))
    assert "\n" not in str(raised.value)


def test_noisy_with_a_custom_model_is_refused_as_for_dqn(tmp_path):
    raw = raw_config(tmp_path, noisy=True)
    raw["model"] = {"custom": "tests.custom_models:TinyActorCritic"}
    with pytest.raises(ConfigError, match=r"training.noisy: .*custom model"):
        config_mod.resolve(raw)


def test_the_defaults_are_the_papers():
    training = QRDQN.config_class()
    assert training.num_quantiles == 200 and training.kappa == 1.0  # Dabney et al. 2018: QR-DQN-1, N 200
    assert training.double_q and training.dueling  # DQN's defaults, as dqn


# ----------------------------------------------------------------------------- acting


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_actions_follow_the_mean_of_the_quantiles(tmp_path, backend):
    config = resolve(
        tmp_path, "qrdqn", {"num_quantiles": 5, "dueling": False}, {"activation": "relu"}, backend=backend
    )
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    policy.set_weights(random_weights(policy.get_weights(), seed=4, gain=3.0))
    obs = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    quantiles = atom_logits(policy.get_weights(), obs, 5)  # [B, 2, 5]
    actions, _, _ = policy.compute_actions(timestep(obs), explore=False)
    np.testing.assert_array_equal(actions, quantiles.mean(axis=-1).argmax(axis=-1))
    # the mean is not the median or the top quantile: rows where those pick the other action exist
    assert (quantiles[..., 2].argmax(axis=-1) != actions).any() or (
        quantiles[..., 4].argmax(axis=-1) != actions
    ).any()
    assert len(np.unique(actions)) == 2
    assert policy.epsilon() == 1.0  # epsilon-greedy from 1 at timestep 0, as dqn


# ----------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_round_trip_restores_weights_target_counters_replay_and_noise(tmp_path, backend):
    """Noisy layers and prioritized replay on: the restored trainer holds the same online and target
    networks, optimizer step count, counters, replay rows and priorities, and the same noise generator."""
    raw = raw_config(tmp_path, backend, prioritized_replay=True, noisy=True, n_step=2)
    trainer, restored = QRDQN(raw, logdir=tmp_path / "a"), None
    try:
        while trainer.num_target_updates == 0 or trainer.timesteps_total == trainer.last_target_update:
            trainer.train()
        assert any(
            not np.array_equal(trainer.policy.get_weights()[k], v)
            for k, v in trainer.policy.get_target_weights().items()
        )  # the target lags the online network
        path = trainer.save()
        restored = QRDQN(raw_config(tmp_path, backend, prioritized_replay=True, noisy=True, n_step=2),
                         logdir=tmp_path / "b")  # fmt: skip
        restored.restore(path)
        assert (restored.timesteps_total, restored.num_target_updates) == (
            trainer.timesteps_total,
            trainer.num_target_updates,
        )
        assert restored.policy.num_grad_updates == trainer.policy.num_grad_updates
        for getter in ("get_weights", "get_target_weights"):
            expected, actual = getattr(trainer.policy, getter)(), getattr(restored.policy, getter)()
            assert set(actual) == set(expected)
            for name in expected:
                np.testing.assert_array_equal(actual[name], expected[name], err_msg=f"{getter}: {name}")
        np.testing.assert_array_equal(restored.replay_buffer.priorities(), trainer.replay_buffer.priorities())
        assert restored.policy.noise_rng.random() == trainer.policy.noise_rng.random()
        # learning goes on from the same state: one more step on the same batch gives the same result
        batch = trainer.replay_buffer.sample(8)
        stats = [t.policy.learn_on_batch(batch) for t in (trainer, restored)]
        assert stats[1]["total_loss"] == pytest.approx(stats[0]["total_loss"], rel=1e-6)
        np.testing.assert_allclose(restored.policy.td_errors, trainer.policy.td_errors, rtol=1e-6)
    finally:
        trainer.stop()
        if restored is not None:
            restored.stop()


@pytest.mark.slow
@pytest.mark.parametrize(("trained_with", "evaluated_with"), [("torch", "tf"), ("tf", "torch")])
def test_a_checkpoint_gives_the_same_quantiles_and_actions_on_the_other_backend(
    tmp_path, trained_with, evaluated_with
):
    """Same weight names and layouts on both backends: a checkpoint's quantiles move unchanged."""
    pytest.importorskip("tensorflow")
    from rlgear.run import agent

    raw = raw_config(tmp_path / trained_with, trained_with, dueling=True, n_step=3)
    raw["stop"] = {"training_iteration": 4}
    result = rlgear.train(raw)
    assert result["learner/num_grad_updates"] > 0, sorted(result)
    (run_dir,) = (tmp_path / trained_with / "runs").iterdir()
    original = agent.load(run_dir)
    moved = agent.load(run_dir, [f"backend={evaluated_with}"])
    assert type(moved.policy).__module__.endswith(f"qrdqn_{evaluated_with}_policy")
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    np.testing.assert_allclose(
        moved.policy.action_distribution_inputs(obs),
        original.policy.action_distribution_inputs(obs),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_array_equal(moved.compute_actions(obs), original.compute_actions(obs))


# ----------------------------------------------------------------------------- reset_config


def test_reset_config_takes_loss_settings_but_refuses_another_number_of_quantiles(tmp_path):
    raw = raw_config(tmp_path)
    trainer = QRDQN(raw, logdir=tmp_path / "run")
    try:
        assert trainer.reset_config(raw_config(tmp_path, lr=5e-4, kappa=2.0))
        assert trainer.policy.config.training.kappa == 2.0
        assert not trainer.reset_config(raw_config(tmp_path, lr=5e-4, kappa=2.0, num_quantiles=7))
        assert trainer.config.training.num_quantiles == 5
    finally:
        trainer.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_compute_td_errors_gives_the_per_row_loss_without_learning(tmp_path, backend):
    """Ape-X-style initial priorities: the same per-row loss a learning step reports, weights unchanged."""
    from tests.test_dqn_loss_reference import transitions

    config = resolve(tmp_path, "qrdqn", {"num_quantiles": 5, "train_batch_size": 24}, backend=backend)
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    batch = transitions(scale=3.0)
    before = policy.get_weights()
    priorities = policy.compute_td_errors(batch)
    assert all(np.array_equal(before[k], v) for k, v in policy.get_weights().items())
    policy.learn_on_batch(SB(batch))
    np.testing.assert_allclose(policy.td_errors, priorities, rtol=1e-5, atol=1e-6)
    assert (priorities > 0).all()
