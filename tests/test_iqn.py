"""Tests of iqn beyond its loss (test_iqn_loss_reference.py): config errors, the support matrix, acting on
the mean of K sampled quantile values, checkpoints (tau generators included) on both backends, the same
weights acting the same on both backends, and the refusals of the numpy runtime and of export.

The learning tests are in test_learning_iqn.py.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.errors import ConfigError, RLGearError
from rlgear.plugins.algorithms.dqn.iqn import IQN
from rlgear.timestep import StepType, TimeStep
from tests.conftest import BACKENDS
from tests.numpy_reference import CARTPOLE_ACT, CARTPOLE_OBS, make_policy, random_weights, resolve
from tests.test_iqn_loss_reference import z_values

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")
SAMPLES = {"num_tau_samples": 4, "num_tau_prime_samples": 5, "num_quantile_samples": 3, "num_cosines": 6}


def raw_config(tmp_path, backend="torch", **training):
    """A tiny iqn run: 2 envs, 4-step fragments, learning after 16 env steps, a few taus."""
    return {
        "algorithm": "iqn",
        "backend": backend,
        "seed": 0,
        "env": {"name": "CartPole-v1", "vectorization": "sync"},
        "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 4},
        "model": {"hidden_sizes": [16, 16], "activation": "relu"},
        "training": {
            **SAMPLES,
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


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("training", "key", "message"),
    [
        ({"num_tau_samples": 0}, "training.num_tau_samples", "expected a positive integer"),
        ({"num_tau_prime_samples": -1}, "training.num_tau_prime_samples", "expected a positive integer"),
        ({"num_quantile_samples": 0}, "training.num_quantile_samples", "expected a positive integer"),
        ({"num_cosines": 0}, "training.num_cosines", "expected a positive integer"),
        ({"noisy": True}, "training.noisy", "no noisy layers: expected false"),
        ({"num_quantiles": 8}, "training.num_quantiles", "unknown key"),  # IQN samples its taus
        ({"num_atoms": 51}, "training.num_atoms", "not C51's atoms"),  # qrdqn's checks still run
        ({"kappa": -1.0}, "training.kappa", "expected 0 .* or a positive number"),
    ],
)
def test_config_errors_name_the_key_in_one_line(tmp_path, training, key, message):
    with pytest.raises(ConfigError, match=rf"{key}: .*({message})") as raised:
        config_mod.resolve(raw_config(tmp_path, **training))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("model", "key", "message"),
    [
        ({"custom": "tests.custom_models:TinyActorCritic"}, "model.custom", "expected no custom model"),
        ({"hidden_sizes": []}, "model.hidden_sizes", "expected one size at least"),
    ],
)
def test_models_iqn_cannot_build_are_refused_before_training(tmp_path, model, key, message):
    raw = raw_config(tmp_path)
    raw["model"] = model
    with pytest.raises(ConfigError, match=rf"{key}: .*{message}") as raised:
        IQN(raw, logdir=tmp_path / "run")
    assert "\n" not in str(raised.value)


def test_the_defaults_are_the_papers():
    training = IQN.config_class()
    assert (training.num_tau_samples, training.num_tau_prime_samples) == (64, 64)  # Dabney et al. 2018b
    assert (training.num_quantile_samples, training.num_cosines, training.kappa) == (32, 64, 1.0)


def test_capabilities_and_the_plugins_matrix_row(monkeypatch, capsys):
    assert IQN.capabilities() == {
        "discrete": True, "continuous": False, "multi_discrete": False, "composite": False,
        "backends": ["tf", "torch"], "multi_agent": True, "recurrent": False,
        "league": True, "relational": False,
    }  # fmt: skip
    from rlgear import cli

    monkeypatch.setenv("COLUMNS", "200")  # in process: a subprocess would pay torch's and TF's import again
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("iqn ")]
    matrix_row = [row for row in rows if "yes" in row]
    assert matrix_row and matrix_row[0][1:5] == ["yes", "-", "-", "-"], matrix_row  # discrete actions only


# ----------------------------------------------------------------------------- acting


def policy_with_weights(tmp_path, backend, seed=4, **training):
    config = resolve(
        tmp_path, "iqn", {**SAMPLES, "dueling": False, **training}, {"activation": "relu"}, backend=backend
    )
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    policy.set_weights(random_weights(policy.get_weights(), seed=seed, gain=3.0))
    return policy


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_actions_follow_the_mean_over_k_sampled_taus(tmp_path, backend):
    policy = policy_with_weights(tmp_path, backend)
    obs = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    taus = copy.deepcopy(policy.acting_tau_rng).random((200, 3)).astype(np.float32)  # [B, K], as documented
    expected = z_values(policy.get_weights(), obs, taus).mean(axis=1).argmax(axis=-1)
    actions, _, _ = policy.compute_actions(timestep(obs), explore=False)
    np.testing.assert_array_equal(actions, expected)
    assert len(np.unique(actions)) == 2
    # fresh taus at every call: the next call's draw differs, and so do some rows' Q-value means
    again = copy.deepcopy(policy.acting_tau_rng).random((200, 3))
    assert not np.allclose(again, taus)
    assert policy.epsilon() == 1.0  # epsilon-greedy from 1 at timestep 0, as dqn


@pytest.mark.parametrize("dueling", [False, True])
def test_the_same_weights_and_taus_act_the_same_on_both_backends(tmp_path, dueling):
    """Neutral names and layouts: torch weights loaded into TF give the same quantile values at the same
    taus, the same Q at the fixed taus (the model contract) and, with the same seed, the same actions."""
    pytest.importorskip("tensorflow")
    from rlgear.plugins.backends.tf import tf

    torch_policy = policy_with_weights(tmp_path / "torch", "torch", dueling=dueling)
    tf_policy = policy_with_weights(tmp_path / "tf", "tf", seed=9, dueling=dueling)
    tf_policy.set_weights(torch_policy.get_weights())
    rng = np.random.default_rng(2)
    obs, taus = rng.normal(size=(64, 4)).astype(np.float32), rng.random((64, 7)).astype(np.float32)
    import torch

    with torch.no_grad():
        z_torch = torch_policy.model.quantile_values(torch.from_numpy(obs), torch.from_numpy(taus)).numpy()
    z_tf = tf_policy.model.quantile_values(tf.constant(obs), tf.constant(taus)).numpy()
    np.testing.assert_allclose(z_tf, z_torch, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        tf_policy.action_distribution_inputs(obs),
        torch_policy.action_distribution_inputs(obs),
        rtol=1e-5,
        atol=1e-5,
    )
    torch_actions, _, _ = torch_policy.compute_actions(timestep(obs), explore=False)
    tf_actions, _, _ = tf_policy.compute_actions(timestep(obs), explore=False)
    np.testing.assert_array_equal(tf_actions, torch_actions)


# ----------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_round_trip_restores_weights_target_replay_and_tau_generators(tmp_path, backend):
    """Prioritized replay on: the restored trainer holds the same networks, optimizer step count,
    counters, replay priorities and tau generators, and its next learning step and actions are the same."""
    raw = raw_config(tmp_path, backend, prioritized_replay=True, n_step=2)
    trainer, restored = IQN(raw, logdir=tmp_path / "a"), None
    try:
        while trainer.num_target_updates == 0 or trainer.timesteps_total == trainer.last_target_update:
            trainer.train()
        path = trainer.save()
        restored = IQN(
            raw_config(tmp_path, backend, prioritized_replay=True, n_step=2), logdir=tmp_path / "b"
        )
        assert restored.policy.tau_rng.bit_generator.state != trainer.policy.tau_rng.bit_generator.state
        restored.restore(path)
        assert restored.timesteps_total == trainer.timesteps_total
        assert restored.policy.num_grad_updates == trainer.policy.num_grad_updates
        for getter in ("get_weights", "get_target_weights"):
            expected, actual = getattr(trainer.policy, getter)(), getattr(restored.policy, getter)()
            assert set(actual) == set(expected)
            for name in expected:
                np.testing.assert_array_equal(actual[name], expected[name], err_msg=f"{getter}: {name}")
        np.testing.assert_array_equal(restored.replay_buffer.priorities(), trainer.replay_buffer.priorities())
        for name in ("tau_rng", "acting_tau_rng"):
            assert (
                getattr(restored.policy, name).bit_generator.state
                == getattr(trainer.policy, name).bit_generator.state
            )
        # learning and acting go on identically: the same taus are drawn
        batch = trainer.replay_buffer.sample(8)
        stats = [t.policy.learn_on_batch(batch) for t in (trainer, restored)]
        assert stats[1]["total_loss"] == pytest.approx(stats[0]["total_loss"], rel=1e-6)
        np.testing.assert_allclose(restored.policy.td_errors, trainer.policy.td_errors, rtol=1e-6)
        obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
        acted = [t.policy.compute_actions(timestep(obs), explore=False)[0] for t in (trainer, restored)]
        np.testing.assert_array_equal(acted[1], acted[0])
    finally:
        trainer.stop()
        if restored is not None:
            restored.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_compute_td_errors_gives_the_per_row_loss_without_learning(tmp_path, backend):
    """Ape-X-style initial priorities at the taus a learning step from the same generator state draws."""
    from rlgear.sample_batch import SampleBatch as SB
    from tests.test_dqn_loss_reference import transitions

    config = resolve(tmp_path, "iqn", {**SAMPLES, "train_batch_size": 24}, backend=backend)
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    batch = transitions(scale=3.0)
    before, rng = policy.get_weights(), copy.deepcopy(policy.tau_rng)
    priorities = policy.compute_td_errors(batch)
    assert all(np.array_equal(before[k], v) for k, v in policy.get_weights().items())
    policy.tau_rng = rng  # the step draws the taus compute_td_errors drew
    policy.learn_on_batch(SB(batch))
    np.testing.assert_allclose(policy.td_errors, priorities, rtol=1e-5, atol=1e-6)
    assert (priorities > 0).all()


# ----------------------------------------------------------------------------- refusals


def test_the_numpy_runtime_and_export_refuse_an_iqn_checkpoint_in_one_line(tmp_path, capsys):
    import rlgear.inference
    from rlgear.cli.main import main
    from rlgear.errors import CheckpointError

    trainer = IQN(raw_config(tmp_path), logdir=tmp_path / "run")
    try:
        path = trainer.save()
        with pytest.raises(RLGearError, match=r"iqn: .*sampled afresh at every step.*not exported") as raised:
            trainer.policy.export_head(explore=False)
        assert "\n" not in str(raised.value)
    finally:
        trainer.stop()
    with pytest.raises(CheckpointError, match=r"implicit quantile network \(iqn.*rlgear.run.agent") as raised:
        rlgear.inference.load(path)
    assert "\n" not in str(raised.value)
    assert "refuses iqn too" in str(raised.value)  # no pointer to an export path that refuses it
    capsys.readouterr()
    assert main(["export", str(path), "--format", "torchscript", "--out", str(tmp_path / "policy.pt")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(errors) == 1 and "iqn checkpoints are not exported" in errors[0], errors
    assert not (tmp_path / "policy.pt").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("trained_with", "evaluated_with"), [("torch", "tf"), ("tf", "torch")])
def test_a_checkpoint_gives_the_same_q_values_and_actions_on_the_other_backend(
    tmp_path, trained_with, evaluated_with
):
    """A trained checkpoint loaded on the other backend: the same weights and tau generator state, so
    the same fixed-tau Q-values and the same greedy actions on sampled taus."""
    pytest.importorskip("tensorflow")
    import rlgear
    from rlgear.run import agent

    raw = raw_config(tmp_path / trained_with, trained_with, dueling=True, n_step=3)
    raw["stop"] = {"training_iteration": 4}
    result = rlgear.train(raw)
    assert result["learner/num_grad_updates"] > 0, sorted(result)
    (run_dir,) = (tmp_path / trained_with / "runs").iterdir()
    original = agent.load(run_dir)
    moved = agent.load(run_dir, [f"backend={evaluated_with}"])
    assert type(moved.policy).__module__.endswith(f"iqn_{evaluated_with}_policy")
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    np.testing.assert_allclose(
        moved.policy.action_distribution_inputs(obs),
        original.policy.action_distribution_inputs(obs),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_array_equal(moved.compute_actions(obs), original.compute_actions(obs))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_config_takes_loss_settings_but_refuses_another_network(tmp_path, backend):
    """N, N' and kappa are the loss's: they change on a live trainer (the next step draws N = 7 taus)."""
    from rlgear.plugins.algorithms.dqn.iqn_config import TAUS

    trainer = IQN(raw_config(tmp_path, backend), logdir=tmp_path / "run")
    try:
        trainer.train()
        assert trainer.reset_config(raw_config(tmp_path, backend, lr=5e-4, kappa=2.0, num_tau_samples=7))
        assert trainer.policy.config.training.kappa == 2.0
        assert trainer.policy.with_taus(trainer.replay_buffer.sample(8))[TAUS].shape == (8, 7)
        stats = trainer.policy.learn_on_batch(trainer.replay_buffer.sample(8))
        assert np.isfinite(stats["total_loss"]) and trainer.policy.td_errors.shape == (8,)
        assert not trainer.reset_config(raw_config(tmp_path, backend, num_cosines=9))
        assert not trainer.reset_config(raw_config(tmp_path, backend, dueling=False))
        assert trainer.config.training.num_cosines == SAMPLES["num_cosines"]
    finally:
        trainer.stop()
