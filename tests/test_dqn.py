"""Tests of the DQN plugin: the Q-network, the TD loss and its switches, the training step, checkpoints.

The learning test (CartPole solved by greedy evaluation) is in test_learning_dqn.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rlgear import config as config_mod
from rlgear.blocks.replay_buffers import NEXT_OBS, WEIGHTS, PrioritizedReplayBuffer
from rlgear.errors import ConfigError, UnsupportedError
from rlgear.plugins.algorithms.dqn import DQN, DQNConfig
from rlgear.plugins.algorithms.dqn.torch_policy import DQNTorchPolicy, QNetwork
from rlgear.policy import PolicyState
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep

OBS_2D = Box(np.full(2, -np.inf), np.full(2, np.inf))
CARTPOLE_OBS = Box(np.full(4, -np.inf), np.full(4, np.inf))


# ----------------------------------------------------------------------------- helpers


def raw_config(tmp_path, training=None, model=None, env="CartPole-v1", **sections):
    """A tiny DQN run: 2 envs, fragments of 4 steps, a 16-unit Q-network, learning after 16 steps."""
    config = {
        "algorithm": "dqn",
        "seed": 0,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 4},
        "model": {"hidden_sizes": [16], "activation": "relu", **(model or {})},
        "training": {
            "env_steps_per_training_step": 8,
            "learning_starts": 16,
            "train_batch_size": 8,
            "training_intensity": 2.0,
            "buffer_size": 200,
            "target_network_update_freq": 16,
            "epsilon_timesteps": 100,
            **(training or {}),
        },
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    config.update(sections)
    return config


def resolve(raw):
    return config_mod.resolve(raw, training_class=DQNConfig)


def make_policy(tmp_path, obs_space=OBS_2D, num_actions=2, **kwargs):
    return DQNTorchPolicy(obs_space, Discrete(num_actions), resolve(raw_config(tmp_path, **kwargs)))


@pytest.fixture
def make_trainer(tmp_path):
    """Build DQN trainers (the registry does not list dqn yet); every one is stopped at teardown."""
    trainers = []

    def make(raw):
        trainer = DQN(resolve(raw), logdir=tmp_path / f"run{len(trainers)}")
        trainers.append(trainer)
        return trainer

    yield make
    for trainer in trainers:
        trainer.stop()


def timestep_of(observations):
    n = len(observations)
    return TimeStep(
        step_type=np.full(n, StepType.MID, dtype=np.int32),
        reward=np.zeros(n, dtype=np.float32),
        discount=np.ones(n, dtype=np.float32),
        observation=np.asarray(observations, dtype=np.float32),
        prev_action=np.zeros(n, dtype=np.int64),
        env_id=np.arange(n, dtype=np.int32),
    )


def linear_q_weights(output_kernel, output_bias=(0.0, 0.0)):
    """A 2-2-2 Q-network whose hidden layer passes (non-negative) observations through unchanged."""
    return {
        "q/hidden_0/kernel": np.eye(2, dtype=np.float32),
        "q/hidden_0/bias": np.zeros(2, dtype=np.float32),
        "q/output/kernel": np.asarray(output_kernel, dtype=np.float32),
        "q/output/bias": np.asarray(output_bias, dtype=np.float32),
    }


def linear_policy(tmp_path, **training):
    """A policy with the 2-2-2 plain Q-network that ``linear_q_weights`` fills."""
    return make_policy(tmp_path, training={"dueling": False, **training}, model={"hidden_sizes": [2]})


def transitions(obs, actions, rewards, next_obs, discounts, weights=None):
    columns = {
        SampleBatch.OBS: np.asarray(obs, dtype=np.float32),
        SampleBatch.ACTIONS: np.asarray(actions, dtype=np.int64),
        SampleBatch.REWARDS: np.asarray(rewards, dtype=np.float32),
        NEXT_OBS: np.asarray(next_obs, dtype=np.float32),
        SampleBatch.DISCOUNTS: np.asarray(discounts, dtype=np.float32),
    }
    if weights is not None:
        columns[WEIGHTS] = np.asarray(weights, dtype=np.float32)
    return SampleBatch(columns)


# ----------------------------------------------------------------------------- the Q-network


def test_dueling_q_values_are_value_plus_mean_centred_advantages(tmp_path):
    policy = make_policy(tmp_path, num_actions=3, training={"dueling": True}, model={"hidden_sizes": [4]})
    weights = policy.get_weights()
    assert set(weights) == {
        "q/hidden_0/kernel",
        "q/hidden_0/bias",
        "q/value/kernel",
        "q/value/bias",
        "q/advantage/kernel",
        "q/advantage/bias",
    }
    assert weights["q/hidden_0/kernel"].shape == (2, 4)  # [in, out]
    assert weights["q/advantage/kernel"].shape == (4, 3)

    obs = np.random.default_rng(0).normal(size=(5, 2)).astype(np.float32)
    hidden = np.maximum(obs @ weights["q/hidden_0/kernel"] + weights["q/hidden_0/bias"], 0)
    value = hidden @ weights["q/value/kernel"] + weights["q/value/bias"]
    advantages = hidden @ weights["q/advantage/kernel"] + weights["q/advantage/bias"]
    expected = value + advantages - advantages.mean(axis=1, keepdims=True)  # Wang et al. 2016, eq. 9
    np.testing.assert_allclose(policy.action_distribution_inputs(obs), expected, rtol=1e-5, atol=1e-6)


def test_plain_q_network_has_one_output_layer_and_no_numpy_twin(tmp_path):
    policy = make_policy(tmp_path, training={"dueling": False}, model={"hidden_sizes": [8, 8]})
    assert sorted(policy.get_weights()) == [
        "q/hidden_0/bias",
        "q/hidden_0/kernel",
        "q/hidden_1/bias",
        "q/hidden_1/kernel",
        "q/output/bias",
        "q/output/kernel",
    ]
    assert isinstance(policy.model, QNetwork)
    assert policy.fast_actor is None  # the numpy acting twin mirrors the actor-critic MLP only


def test_weights_round_trip_between_policies_and_reset_the_target_network(tmp_path):
    source = make_policy(tmp_path)
    other = DQNTorchPolicy(OBS_2D, Discrete(2), resolve(raw_config(tmp_path, seed=5)))
    other.set_weights(source.get_weights())
    for name, value in source.get_weights().items():
        np.testing.assert_array_equal(other.get_weights()[name], value, err_msg=name)
        np.testing.assert_array_equal(other.get_target_weights()[name], value, err_msg=name)


def test_a_custom_models_first_output_serves_as_the_q_values(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    policy = make_policy(tmp_path, num_actions=3, model={"custom": "custom_models:TinyActorCritic"})
    assert type(policy.model).__name__ == "TinyActorCritic"
    obs = np.random.default_rng(0).normal(size=(6, 2)).astype(np.float32)
    with torch.no_grad():
        q_values, _ = policy.model(torch.from_numpy(obs))
    greedy, _, _ = policy.compute_actions(timestep_of(obs), explore=False)
    np.testing.assert_array_equal(greedy, q_values.argmax(dim=1).numpy())
    policy.learn_on_batch(transitions(obs[:2], [0, 2], [1.0, 0.0], obs[2:4], [0.9, 0.0]))
    assert policy.td_errors.shape == (2,)


# ----------------------------------------------------------------------------- acting


def test_epsilon_falls_linearly_then_stays_at_its_final_value(tmp_path):
    policy = make_policy(
        tmp_path, training={"epsilon_initial": 1.0, "epsilon_final": 0.1, "epsilon_timesteps": 1000}
    )
    for timestep, expected in [(0, 1.0), (500, 0.55), (1000, 0.1), (10**6, 0.1)]:
        policy.set_global_timestep(timestep)
        assert policy.epsilon() == pytest.approx(expected)


def test_epsilon_greedy_actions_are_random_at_rate_epsilon_and_greedy_without_exploration(tmp_path):
    policy = linear_policy(tmp_path, epsilon_initial=0.5, epsilon_final=0.5)
    policy.set_weights(linear_q_weights([[1.0, 0.0], [0.0, 0.0]]))  # Q(s, 0) = s[0] > 0 = Q(s, 1)
    obs = np.tile([[1.0, 1.0]], (4000, 1))
    actions, state, extras = policy.compute_actions(timestep_of(obs), explore=True)
    assert state is None and extras == {}
    assert actions.dtype == np.int64
    # Random with probability 0.5, and then the non-greedy action half the time.
    assert np.mean(actions == 1) == pytest.approx(0.25, abs=0.03)
    greedy, _, _ = policy.compute_actions(timestep_of(obs), explore=False)
    assert np.all(greedy == 0)


# ----------------------------------------------------------------------------- the loss


def test_double_q_target_selects_with_the_online_network_and_evaluates_with_the_target(tmp_path):
    policy = linear_policy(tmp_path, double_q=True, td_error_loss_fn="mse")
    # Online: Q(s) = [s0, s1]; target: Q(s) = [10 s0, 20 s1] + [1, 2].
    policy.set_weights(linear_q_weights([[1.0, 0.0], [0.0, 1.0]]))
    policy.set_target_weights(linear_q_weights([[10.0, 0.0], [0.0, 20.0]], [1.0, 2.0]))
    batch = transitions(
        obs=[[1.0, 2.0], [3.0, 0.5]],
        actions=[0, 1],
        rewards=[0.5, -1.0],
        next_obs=[[2.0, 1.0], [0.0, 4.0]],
        discounts=[0.9, 0.0],
    )
    # Row 0: online picks action 0 at next_obs (2 > 1); the target values it 10*2 + 1 = 21.
    # Row 1: terminal (discount 0), so the target is the reward alone.
    targets = np.array([0.5 + 0.9 * 21.0, -1.0])
    q_taken = np.array([1.0, 0.5])
    stats = policy.learn_on_batch(batch)
    np.testing.assert_allclose(policy.td_errors, np.abs(q_taken - targets), rtol=1e-6)
    assert stats["total_loss"] == pytest.approx(np.mean(0.5 * (q_taken - targets) ** 2), rel=1e-6)
    assert stats["mean_target_q"] == pytest.approx(targets.mean(), rel=1e-6)


def test_without_double_q_the_target_is_the_target_networks_max(tmp_path):
    policy = linear_policy(tmp_path, double_q=False)
    policy.set_weights(linear_q_weights([[1.0, 0.0], [0.0, 1.0]]))
    policy.set_target_weights(linear_q_weights([[10.0, 0.0], [0.0, 20.0]], [1.0, 2.0]))
    batch = transitions([[1.0, 2.0]], [0], [0.5], [[2.0, 1.0]], [0.9])
    policy.learn_on_batch(batch)
    # max(10*2 + 1, 20*1 + 2) = 22, from action 1, which the online network would not pick.
    assert policy.td_errors[0] == pytest.approx(abs(1.0 - (0.5 + 0.9 * 22.0)))


@pytest.mark.parametrize(
    ("loss_fn", "expected"),
    [
        # TD errors 0.5 and -3 (q_taken - target), delta 1: 0.5 * 0.5**2 and 1 * (3 - 0.5).
        ("huber", (0.125 + 2.5) / 2),
        ("mse", (0.125 + 4.5) / 2),
    ],
)
def test_huber_loss_is_quadratic_within_delta_and_linear_beyond_unlike_mse(tmp_path, loss_fn, expected):
    policy = linear_policy(tmp_path, td_error_loss_fn=loss_fn, huber_delta=1.0)
    policy.set_weights(linear_q_weights([[1.0, 0.0], [0.0, 1.0]]))
    # Q(obs, a) = 1 for both rows; targets are the rewards (discount 0).
    batch = transitions([[1.0, 0.0], [0.0, 1.0]], [0, 1], [0.5, 4.0], [[0.0, 0.0]] * 2, [0.0, 0.0])
    stats = policy.learn_on_batch(batch)
    assert stats["total_loss"] == pytest.approx(expected, rel=1e-6)


def test_importance_weights_scale_each_rows_loss(tmp_path):
    policy = linear_policy(tmp_path, td_error_loss_fn="mse")
    weights = linear_q_weights([[1.0, 0.0], [0.0, 1.0]])
    policy.set_weights(weights)
    rows = ([[1.0, 0.0], [0.0, 1.0]], [0, 1], [3.0, -1.0], [[0.0, 0.0]] * 2, [0.0, 0.0])
    stats = policy.learn_on_batch(transitions(*rows, weights=[0.25, 0.0]))
    # Per-row losses 0.5 * 2**2 and 0.5 * 2**2; only the first counts, a quarter of it.
    assert stats["total_loss"] == pytest.approx((0.25 * 2.0 + 0.0 * 2.0) / 2)

    # A row with weight 0 moves nothing: the output weights of action 1 are untouched.
    after = policy.get_weights()
    np.testing.assert_array_equal(after["q/output/kernel"][:, 1], weights["q/output/kernel"][:, 1])
    assert not np.array_equal(after["q/output/kernel"][:, 0], weights["q/output/kernel"][:, 0])


def test_gradient_norm_is_clipped(tmp_path):
    policy = linear_policy(tmp_path, grad_clip=0.001, lr=1.0, optimizer="sgd")
    policy.set_weights(linear_q_weights([[1.0, 0.0], [0.0, 1.0]]))
    before = policy.get_weights()
    stats = policy.learn_on_batch(transitions([[1.0, 0.0]], [0], [100.0], [[0.0, 0.0]], [0.0]))
    assert stats["grad_gnorm"] > 0.001  # reported before clipping
    change = np.sqrt(sum(np.sum((policy.get_weights()[k] - before[k]) ** 2) for k in before))
    assert change == pytest.approx(0.001, rel=1e-3)  # SGD with lr 1 moves by the clipped gradient


# ----------------------------------------------------------------------------- the target network


def test_target_update_copies_with_tau_1_and_averages_with_smaller_tau(tmp_path):
    policy = linear_policy(tmp_path)
    online, old_target = (
        linear_q_weights([[1.0, 2.0], [3.0, 4.0]]),
        linear_q_weights([[5.0, 6.0], [7.0, 8.0]]),
    )
    policy.set_weights(online)
    policy.set_target_weights(old_target)

    policy.update_target(tau=0.25)  # Polyak: 0.25 online + 0.75 target
    for name in online:
        np.testing.assert_allclose(
            policy.get_target_weights()[name], 0.25 * online[name] + 0.75 * old_target[name], err_msg=name
        )
    policy.update_target(tau=1.0)  # hard copy
    for name in online:
        np.testing.assert_array_equal(policy.get_target_weights()[name], online[name], err_msg=name)


def test_trainer_updates_the_target_network_every_target_network_update_freq_env_steps(
    make_trainer, tmp_path
):
    trainer = make_trainer(raw_config(tmp_path, training={"target_network_update_freq": 24, "tau": 1.0}))
    expected_updates, last_update = 0, 0
    for _ in range(8):  # about 8 env steps each (an episode's reset step is not one); learning starts at 16
        trainer.train()
        timesteps = trainer.timesteps_total
        if timesteps >= 16 and timesteps - last_update >= 24:
            expected_updates, last_update = expected_updates + 1, timesteps
        assert (trainer.num_target_updates, trainer.last_target_update) == (expected_updates, last_update)
    assert expected_updates >= 2


# ----------------------------------------------------------------------------- the training step


def test_postprocess_builds_n_step_transitions_with_discount_gamma_to_the_n(tmp_path):
    config = resolve(raw_config(tmp_path, training={"n_step": 3, "gamma": 0.5}))
    steps = 6
    fragment = SampleBatch(
        {
            SampleBatch.OBS: np.arange(steps, dtype=np.float32).reshape(steps, 1, 1),
            SampleBatch.ACTIONS: np.zeros((steps, 1), dtype=np.int64),
            SampleBatch.REWARDS: np.ones((steps, 1), dtype=np.float32),
            SampleBatch.DISCOUNTS: np.ones((steps, 1), dtype=np.float32),
            SampleBatch.STEP_TYPES: np.full((steps, 1), int(StepType.MID), dtype=np.int32),
        }
    )
    rows = DQN.postprocess(fragment, None, config)
    assert len(rows) == steps - 1
    np.testing.assert_allclose(rows[SampleBatch.REWARDS][:3], 1 + 0.5 + 0.25)
    np.testing.assert_allclose(rows[SampleBatch.DISCOUNTS][:3], 0.125)
    np.testing.assert_array_equal(rows[NEXT_OBS][:3, 0], [3.0, 4.0, 5.0])


def test_training_step_takes_the_gradient_steps_training_intensity_asks_for(make_trainer, tmp_path):
    # 8 env steps x 6 replayed rows per env step / 8 rows per minibatch = 6 gradient steps.
    trainer = make_trainer(raw_config(tmp_path, training={"training_intensity": 6.0, "learning_starts": 0}))
    result = trainer.train()
    assert result["timesteps_this_iter"] == 8
    assert result["learner/num_gradient_steps"] == 6
    assert trainer.policy.num_grad_updates == 6
    assert result["learner/replay_buffer_size"] == 8  # CartPole: no episode ended, one row per env step


def test_no_gradient_step_before_learning_starts_and_at_least_one_after(make_trainer, tmp_path):
    trainer = make_trainer(raw_config(tmp_path, training={"learning_starts": 20, "training_intensity": 0.1}))
    trainer.train()
    trainer.train()
    assert trainer.policy.num_grad_updates == 0
    result = trainer.train()  # 24 env steps (fewer by a reset step or two): learning starts
    # 8 env steps x 0.1 / 8 rows rounds to 0 gradient steps; at least 1 is taken.
    assert result["learner/num_gradient_steps"] == 1
    assert result["learner/epsilon"] == pytest.approx(1.0 - 0.98 * trainer.timesteps_total / 100)


def test_prioritized_replay_beta_is_annealed_linearly_over_its_timesteps(make_trainer, tmp_path):
    """The importance weights themselves, and the priorities fed back, are checked against the
    buffer in tests/test_trainer_wiring.py; this checks the exponent they are computed with."""
    trainer = make_trainer(
        raw_config(
            tmp_path,
            training={
                "prioritized_replay": True,
                "prioritized_replay_beta": 0.4,
                "final_prioritized_replay_beta": 1.0,
                "prioritized_replay_beta_annealing_timesteps": 64,
            },
        )
    )
    assert isinstance(trainer.replay_buffer, PrioritizedReplayBuffer)
    betas = {}
    for _ in range(10):
        result = trainer.train()
        if "learner/prioritized_replay_beta" in result:
            betas[result["timesteps_total"]] = result["learner/prioritized_replay_beta"]
    assert len(betas) >= 6
    for timesteps, beta in betas.items():
        assert beta == pytest.approx(0.4 + 0.6 * min(timesteps, 64) / 64), timesteps
    assert max(betas.values()) == pytest.approx(1.0)  # reached, then held


def test_unsupported_continuous_actions_are_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="continuous"):
        DQN(resolve(raw_config(tmp_path, env="Pendulum-v1")))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("tau", 0.0, "training.tau"),
        ("n_step", 0, "training.n_step"),
        ("epsilon_final", 1.5, "training.epsilon_final"),
        ("training_intensity", 0, "training.training_intensity"),
        ("buffer_size", 4, "training.train_batch_size"),
    ],
)
def test_config_values_out_of_range_are_errors_naming_the_key(tmp_path, key, value, message):
    with pytest.raises(ConfigError, match=message):
        resolve(raw_config(tmp_path, training={key: value}))


def test_reset_config_takes_new_hyperparameters_but_not_another_replay_buffer(make_trainer, tmp_path):
    raw = raw_config(tmp_path)
    trainer = make_trainer(raw)
    trainer.train()
    faster = raw_config(tmp_path, training={"lr": 0.01, "epsilon_final": 0.3})
    assert trainer.reset_config(faster)
    assert trainer.policy.config.training.lr == 0.01
    assert trainer.config.training.epsilon_final == 0.3
    assert not trainer.reset_config(raw_config(tmp_path, training={"buffer_size": 400}))
    assert not trainer.reset_config(raw_config(tmp_path, training={"prioritized_replay": True}))


# ----------------------------------------------------------------------------- checkpoints


def test_policy_state_holds_the_target_network_and_the_acting_rng(tmp_path):
    policy = make_policy(tmp_path)
    policy.update_target(0.0)  # no-op; then make the two networks differ
    with torch.no_grad():
        for param in policy.model.parameters():
            param.add_(1.0)
    policy.compute_actions(timestep_of(np.zeros((3, 2))))
    state = policy.get_state()
    assert {k for k in state.arrays if k.startswith("target/")} == {
        f"target/{k}" for k in policy.get_weights()
    }

    restored = DQNTorchPolicy(OBS_2D, Discrete(2), resolve(raw_config(tmp_path, seed=9)))
    restored.set_state(PolicyState(dict(state.arrays), dict(state.meta)))
    for name, value in policy.get_target_weights().items():
        np.testing.assert_array_equal(restored.get_target_weights()[name], value, err_msg=name)
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(restored.get_weights()[name], value, err_msg=name)
    assert restored.acting_rng.random() == policy.acting_rng.random()


def test_checkpoint_round_trip_restores_policy_target_network_counters_and_replay(make_trainer, tmp_path):
    raw = raw_config(tmp_path, training={"prioritized_replay": True, "target_network_update_freq": 30})
    trainer = make_trainer(raw)
    while trainer.num_target_updates == 0 or trainer.timesteps_total == trainer.last_target_update:
        trainer.train()
    # The target network lags the online one (updated once, trained since).
    assert trainer.num_target_updates == 1
    assert any(
        not np.array_equal(trainer.policy.get_weights()[k], v)
        for k, v in trainer.policy.get_target_weights().items()
    )
    path = trainer.save()

    restored = make_trainer(raw)
    restored.restore(path)
    assert (restored.iteration, restored.timesteps_total) == (trainer.iteration, trainer.timesteps_total)
    assert (restored.last_target_update, restored.num_target_updates) == (trainer.last_target_update, 1)
    assert restored.policy.num_grad_updates == trainer.policy.num_grad_updates
    assert restored.policy.global_timestep == trainer.policy.global_timestep
    for getter in ("get_weights", "get_target_weights"):
        expected, actual = getattr(trainer.policy, getter)(), getattr(restored.policy, getter)()
        for name in expected:
            np.testing.assert_array_equal(actual[name], expected[name], err_msg=f"{getter}: {name}")
    assert len(restored.replay_buffer) == len(trainer.replay_buffer)
    np.testing.assert_array_equal(restored.replay_buffer.priorities(), trainer.replay_buffer.priorities())
    # Same contents and the same sampling RNG: the next minibatch is the same.
    ours, theirs = trainer.replay_buffer.sample(8), restored.replay_buffer.sample(8)
    for column in ours:
        np.testing.assert_array_equal(theirs[column], ours[column], err_msg=column)
    # Training goes on from there.
    restored.train()
    assert restored.timesteps_total == trainer.timesteps_total + 8


def test_checkpoint_without_the_replay_buffer_restores_an_empty_one(make_trainer, tmp_path):
    raw = raw_config(tmp_path, training={"store_buffer_in_checkpoints": False})
    trainer = make_trainer(raw)
    for _ in range(3):
        trainer.train()
    path = trainer.save()
    restored = make_trainer(raw)
    restored.restore(path)
    assert len(restored.replay_buffer) == 0
    assert restored.timesteps_total == 24
    restored.train()  # refills, and learns once it holds rows
    assert len(restored.replay_buffer) == 8
