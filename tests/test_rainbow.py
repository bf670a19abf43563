"""DQN's Rainbow switches beyond the loss: noisy exploration, config errors, checkpoints across backends.

The loss math (C51 projection and cross-entropy, noisy layers) is checked against a numpy
reference in ``test_rainbow_loss_reference.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.blocks.replay_buffers import NEXT_OBS
from rlgear.errors import ConfigError
from rlgear.sample_batch import SampleBatch as SB
from rlgear.timestep import StepType, TimeStep
from tests.conftest import BACKENDS, needs_tf
from tests.numpy_reference import CARTPOLE_ACT, CARTPOLE_OBS, make_policy, resolve
from tests.test_dqn_loss_reference import transitions

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")

RAINBOW = {"num_atoms": 11, "v_min": -5.0, "v_max": 5.0, "noisy": True, "dueling": True, "double_q": True}


def timestep(obs):
    n = len(obs)
    return TimeStep(
        step_type=np.full(n, int(StepType.MID), np.int32),
        reward=np.zeros(n, np.float32),
        discount=np.ones(n, np.float32),
        observation=obs,
        prev_action=np.zeros(n, np.int64),
        env_id=np.arange(n),
    )


def build(tmp_path, backend, training):
    config = resolve(tmp_path, "dqn", training, backend=backend)
    return make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)


def noise_of(policy, model):
    return np.concatenate([np.asarray(layer.noise_out) for layer in model.noisy_layers()])


# ----------------------------------------------------------------------------- noisy exploration


@pytest.mark.parametrize("backend", BACKENDS)
def test_noisy_nets_explore_by_fresh_noise_without_epsilon_and_act_greedily_on_the_mean(tmp_path, backend):
    policy = build(tmp_path, backend, {**RAINBOW, "sigma0": 4.0, "epsilon_initial": 1.0})
    assert policy.epsilon() == 0.0  # epsilon-greedy is off: the noise explores
    obs = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32)
    exploring = [policy.compute_actions(timestep(obs))[0] for _ in range(4)]
    # every acting step draws new noise: the actions change between calls
    assert any((a != exploring[0]).any() for a in exploring[1:])
    greedy = [policy.compute_actions(timestep(obs), explore=False)[0] for _ in range(2)]
    np.testing.assert_array_equal(greedy[0], greedy[1])
    # greedy = the argmax of the expected Q of the mean weights (noise zero)
    assert all(not np.asarray(layer.noise_in).any() for layer in policy.model.noisy_layers())
    logits = policy.action_distribution_inputs(obs).reshape(256, 2, 11)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    np.testing.assert_array_equal(greedy[0], (probs @ np.linspace(-5, 5, 11)).argmax(axis=-1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_training_step_draws_fresh_noise_for_the_online_and_the_target_network(tmp_path, backend):
    policy = build(tmp_path, backend, {**RAINBOW, "train_batch_size": 24})
    seen = []
    for _ in range(2):
        policy.learn_on_batch(transitions())
        seen.append((noise_of(policy, policy.model), noise_of(policy, policy.target_model)))
    (online_1, target_1), (online_2, target_2) = seen
    assert not np.allclose(online_1, target_1)  # independent noise for the target network
    assert not np.allclose(online_1, online_2) and not np.allclose(target_1, target_2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_noise_is_not_a_weight_and_sigmas_start_at_sigma0_over_sqrt_inputs(tmp_path, backend):
    policy = build(tmp_path, backend, {**RAINBOW, "sigma0": 0.4})
    weights = policy.get_weights()
    assert not any("noise" in name for name in weights)
    assert set(weights) >= {"q/hidden_0/kernel_mu", "q/hidden_0/kernel_sigma", "q/value/bias_sigma"}
    assert weights["q/hidden_0/kernel_mu"].shape == (4, 8)  # [in, out]
    np.testing.assert_allclose(weights["q/hidden_1/kernel_sigma"], 0.4 / np.sqrt(8), rtol=1e-6)
    np.testing.assert_allclose(weights["q/advantage/bias_sigma"], 0.4 / np.sqrt(6), rtol=1e-6)
    assert weights["q/advantage/kernel_mu"].shape == (6, 2 * 11)  # actions x atoms, dueling per atom
    assert weights["q/value/kernel_mu"].shape == (6, 11)


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_state_restores_the_noise_generator(tmp_path, backend):
    policy = build(tmp_path, backend, RAINBOW)
    state = policy.get_state()
    obs = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    first = [policy.compute_actions(timestep(obs))[0] for _ in range(3)]
    policy.set_state(state)
    again = [policy.compute_actions(timestep(obs))[0] for _ in range(3)]
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_without_c51_and_noise_the_q_network_keeps_its_weight_names(tmp_path):
    policy = build(tmp_path, "torch", {"dueling": False})
    assert sorted(policy.get_weights()) == [
        "q/hidden_0/bias", "q/hidden_0/kernel", "q/hidden_1/bias", "q/hidden_1/kernel",
        "q/output/bias", "q/output/kernel",
    ]  # fmt: skip
    assert policy.epsilon() == 1.0


# ----------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    ("training", "key", "message"),
    [
        ({"num_atoms": 0}, "training.num_atoms", "expected 1"),
        ({"num_atoms": 51, "v_min": 10.0, "v_max": 10.0}, "training.v_min", "v_min < v_max"),
        ({"num_atoms": 51, "v_min": 5.0, "v_max": -5.0}, "training.v_min", "v_min < v_max"),
        ({"noisy": True, "sigma0": 0.0}, "training.sigma0", "positive"),
    ],
)
def test_nonsensical_rainbow_settings_are_config_errors_naming_the_key(tmp_path, training, key, message):
    with pytest.raises(ConfigError, match=rf"{key}: .*{message}"):
        resolve(tmp_path, "dqn", training)


def test_noisy_with_a_custom_model_is_refused(tmp_path):
    from rlgear import config as config_mod

    raw = {
        "algorithm": "dqn",
        "env": {"name": "CartPole-v1"},
        "training": {"noisy": True},
        "model": {"custom": "tests.custom_models:TinyActorCritic"},
    }
    with pytest.raises(ConfigError, match=r"training.noisy: .*custom model"):
        config_mod.resolve(raw)


# ----------------------------------------------------------------------------- across backends


@needs_tf
@pytest.mark.parametrize(("trained_with", "evaluated_with"), [("torch", "tf"), ("tf", "torch")])
def test_a_rainbow_checkpoint_gives_the_same_q_distributions_and_actions_on_the_other_backend(
    tmp_path, trained_with, evaluated_with
):
    """C51 + noisy + dueling, trained two iterations on one backend, loaded on the other."""
    import rlgear
    from rlgear.run import agent

    result = rlgear.train(
        {
            "algorithm": "dqn",
            "backend": trained_with,
            "seed": 0,
            "env": {"name": "CartPole-v1"},
            "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 16},
            "training": {**RAINBOW, "learning_starts": 32, "env_steps_per_training_step": 32,
                         "train_batch_size": 32, "prioritized_replay": True, "n_step": 3},
            "model": {"hidden_sizes": [16, 16]},
            "stop": {"training_iteration": 2},
            "logging": {"dir": str(tmp_path / trained_with), "tensorboard": False, "progress": "none"},
        }
    )  # fmt: skip
    assert result["learner/num_grad_updates"] > 0, sorted(result)
    (run_dir,) = (tmp_path / trained_with).iterdir()
    original = agent.load(run_dir)
    moved = agent.load(run_dir, [f"backend={evaluated_with}"])
    assert type(moved.policy).__module__.endswith(f"{evaluated_with}_policy")
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    np.testing.assert_array_equal(moved.compute_actions(obs), original.compute_actions(obs))  # greedy
    # the atoms' logits of the mean weights (greedy acting left the noise at zero), as distributions
    got, expected = (p.policy.action_distribution_inputs(obs).reshape(64, 2, 11) for p in (moved, original))

    def softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    np.testing.assert_allclose(softmax(got), softmax(expected), rtol=1e-5, atol=1e-6)
    # the same seed draws the same noise on both backends: exploring acts the same too
    moved.policy.noise_rng, original.policy.noise_rng = np.random.default_rng(4), np.random.default_rng(4)
    np.testing.assert_array_equal(
        moved.policy.compute_actions(timestep(obs))[0], original.policy.compute_actions(timestep(obs))[0]
    )


@needs_tf
def test_c51_noisy_loss_and_priorities_match_between_backends_on_the_same_weights(tmp_path):
    """Same weights, same noise generator: the same loss, statistics and priorities."""
    torch_policy = build(tmp_path / "a", "torch", {**RAINBOW, "train_batch_size": 24})
    tf_policy = build(tmp_path / "b", "tf", {**RAINBOW, "train_batch_size": 24})
    tf_policy.set_weights(torch_policy.get_weights())
    batch = transitions(scale=3.0)
    assert NEXT_OBS in batch and SB.REWARDS in batch
    stats = [p.learn_on_batch(batch) for p in (torch_policy, tf_policy)]
    for key in ("total_loss", "mean_q", "mean_target_q", "mean_cross_entropy", "grad_gnorm"):
        assert stats[1][key] == pytest.approx(stats[0][key], rel=1e-4, abs=1e-5), key
    np.testing.assert_allclose(tf_policy.td_errors, torch_policy.td_errors, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- custom models, multi-agent


def test_a_custom_model_can_be_distributional_with_actions_times_atoms_outputs(tmp_path, monkeypatch):
    from pathlib import Path

    import torch

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    training = {"num_atoms": 5, "v_min": -1.0, "v_max": 1.0, "train_batch_size": 24}
    config = resolve(tmp_path, "dqn", training, {"custom": "custom_models:TinyActorCritic"})
    policy = make_policy(config, "torch", CARTPOLE_OBS, CARTPOLE_ACT)
    assert policy.model.num_outputs == 2 * 5
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    with torch.no_grad():
        logits = policy.model(torch.from_numpy(obs))[0].numpy().reshape(32, 2, 5)
    probs = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    greedy, _, _ = policy.compute_actions(timestep(obs), explore=False)
    np.testing.assert_array_equal(greedy, (probs @ np.linspace(-1, 1, 5)).argmax(axis=-1))
    stats = policy.learn_on_batch(transitions())
    assert np.isfinite(stats["mean_cross_entropy"]) and (policy.td_errors > 0).all()


def test_multi_agent_policies_can_differ_in_their_rainbow_switches(tmp_path):
    """One policy C51 + noisy, the other plain DQN, in one run (a replay buffer and a loss each)."""
    from rlgear.discovery import registry

    raw = {
        "algorithm": "dqn",
        "env": {"adapter": "vector", "name": "tests.multi_agent_envs:make_match"},
        "workers": {"num_envs_per_worker": 4},
        "model": {"hidden_sizes": [16]},
        "training": {"learning_starts": 64, "target_network_update_freq": 64},
        "multiagent": {
            "policies": {"pa": {"training": RAINBOW}, "pb": {}},
            "policy_mapping": {"a": "pa", "b": "pb"},
        },
        "seed": 1,
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    trainer = registry.load_algorithm("dqn")(raw)
    try:
        for _ in range(3):
            result = trainer.train()
        pa, pb = trainer.policy_map["pa"], trainer.policy_map["pb"]
        assert "q/value/kernel_sigma" in pa.get_weights() and "q/value/kernel" in pb.get_weights()
        assert result["learner/pa/num_grad_updates"] > 0 and result["learner/pb/num_grad_updates"] > 0
        assert "learner/pa/mean_cross_entropy" in result and "learner/pb/mean_td_error" in result
        assert result["learner/pa/epsilon"] == 0.0 and result["learner/pb/epsilon"] > 0.0
    finally:
        trainer.stop()


@pytest.mark.parametrize(("key", "value"), [("num_atoms", 21), ("noisy", False), ("v_max", 7.0)])
def test_reset_config_refuses_a_change_of_the_q_networks_shape_or_support(tmp_path, key, value):
    from rlgear.plugins.algorithms.dqn import DQN

    raw = {
        "algorithm": "dqn",
        "seed": 0,
        "env": {"name": "CartPole-v1"},
        "workers": {"num_envs_per_worker": 2},
        "model": {"hidden_sizes": [8]},
        "training": dict(RAINBOW),
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    trainer = DQN(raw)
    try:
        assert trainer.reset_config({**raw, "training": {**RAINBOW, "lr": 5e-4}})  # a loss setting: taken
        assert not trainer.reset_config({**raw, "training": {**RAINBOW, "lr": 5e-4, key: value}})
        assert trainer.config.training.lr == 5e-4 and getattr(trainer.config.training, key) == RAINBOW[key]
    finally:
        trainer.stop()
