"""SAC, TD3 and DDPG: acting (numpy twin, bounds, noise), the stacked critics, the training step, checkpoints.

The losses are checked against numpy in test_offpolicy_loss_reference.py; the learning tests
(Pendulum solved by greedy evaluation) are in test_learning_offpolicy.py.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlgear import config as config_mod  # noqa: E402
from rlgear.discovery import registry  # noqa: E402
from rlgear.errors import ConfigError, UnsupportedError  # noqa: E402
from rlgear.plugins.backends.torch.offpolicy import StackedMLP  # noqa: E402
from rlgear.policy import PolicyState  # noqa: E402
from rlgear.run import checkpoint as ckpt  # noqa: E402
from rlgear.spaces import Box  # noqa: E402
from rlgear.timestep import StepType, TimeStep  # noqa: E402

PENDULUM_OBS = Box(np.array([-1.0, -1.0, -8.0]), np.array([1.0, 1.0, 8.0]))
ASYMMETRIC_ACT = Box(np.array([-1.0, 0.0]), np.array([3.0, 0.5]))
ALGORITHMS = ("sac", "td3", "ddpg")


def raw_config(tmp_path, algorithm, training=None, env="Pendulum-v1", **sections):
    """A tiny run: 2 envs, fragments of 4 steps, 16-unit networks, learning after 16 steps."""
    config = {
        "algorithm": algorithm,
        "seed": 0,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 4},
        "model": {"hidden_sizes": [16, 16], "activation": "relu"},
        "training": {
            "env_steps_per_training_step": 8,
            "learning_starts": 16,
            "train_batch_size": 8,
            "training_intensity": 2.0,
            "buffer_size": 200,
            **(training or {}),
        },
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    config.update(sections)
    return config


def resolve(raw):
    return config_mod.resolve(raw, training_class=registry.load_algorithm(raw["algorithm"]).config_class)


def make_policy(tmp_path, algorithm, action_space=ASYMMETRIC_ACT, **training):
    config = resolve(raw_config(tmp_path, algorithm, training))
    return registry.load_algorithm(algorithm).policy_class("torch")(PENDULUM_OBS, action_space, config)


@pytest.fixture
def make_trainer(tmp_path):
    trainers = []

    def make(raw):
        trainer = registry.load_algorithm(raw["algorithm"])(
            resolve(raw), logdir=tmp_path / f"run{len(trainers)}"
        )
        trainers.append(trainer)
        return trainer

    yield make
    for trainer in trainers:
        trainer.stop()


def timestep_of(observations, step_type=StepType.MID):
    n = len(observations)
    return TimeStep(
        step_type=np.full(n, step_type, dtype=np.int32),
        reward=np.zeros(n, dtype=np.float32),
        discount=np.ones(n, dtype=np.float32),
        observation=np.asarray(observations, dtype=np.float32),
        prev_action=np.zeros((n, 2), dtype=np.float32),
        env_id=np.arange(n, dtype=np.int32),
    )


def observations(n=64, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=(n, 3)).astype(np.float32)


# ----------------------------------------------------------------------------- networks and acting


def test_stacked_critics_equal_separate_mlps_member_by_member():
    stacked = StackedMLP(2, 5, [7, 6], 1, "relu")
    x = torch.randn(9, 5)
    out = stacked(x)
    assert out.shape == (2, 9, 1)
    for k in range(2):
        h = x
        for i, (kernel, bias) in enumerate(zip(stacked.kernels, stacked.biases, strict=True)):
            h = h @ kernel[k] + bias[k]
            if i < 2:
                h = torch.relu(h)
        torch.testing.assert_close(out[k], h)
    assert not torch.equal(out[0], out[1])  # the members are initialised independently


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_numpy_twin_greedy_actions_equal_the_frameworks_tanh_mean_rescaled_to_the_bounds(tmp_path, algorithm):
    policy = make_policy(tmp_path, algorithm, learning_starts=0)
    obs = observations()
    actions, _, _ = policy.compute_actions(timestep_of(obs), explore=False)
    np.testing.assert_allclose(actions, policy.greedy_actions(obs), rtol=1e-5, atol=1e-5)
    assert actions.dtype == np.float32 and actions.shape == (64, 2)
    # Not the identity of tanh's range: the second dimension lives in [0, 0.5].
    assert (actions[:, 1] >= 0).all() and (actions[:, 1] <= 0.5).all()
    assert (actions[:, 0] > 0.5).any() or (actions[:, 0] < 0.5).any()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_exploring_actions_stay_within_the_bounds_and_differ_from_greedy(tmp_path, algorithm):
    policy = (
        make_policy(tmp_path, algorithm, learning_starts=0, exploration_noise_scale=0.5)
        if (algorithm != "sac")
        else make_policy(tmp_path, algorithm, learning_starts=0)
    )
    obs = observations()
    explored, _, _ = policy.compute_actions(timestep_of(obs))
    greedy, _, _ = policy.compute_actions(timestep_of(obs), explore=False)
    assert (explored >= ASYMMETRIC_ACT.low).all() and (explored <= ASYMMETRIC_ACT.high).all()
    assert np.abs(explored - greedy).mean() > 0.01


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_actions_are_uniform_over_the_box_before_learning_starts(tmp_path, algorithm):
    policy = make_policy(tmp_path, algorithm, learning_starts=100)
    obs = observations(4000)
    actions, _, _ = policy.compute_actions(timestep_of(obs))
    expected_mean = (ASYMMETRIC_ACT.low + ASYMMETRIC_ACT.high) / 2
    np.testing.assert_allclose(actions.mean(axis=0), expected_mean, atol=0.05)
    uniform_std = (ASYMMETRIC_ACT.high - ASYMMETRIC_ACT.low) / np.sqrt(12)
    np.testing.assert_allclose(actions.std(axis=0), uniform_std, rtol=0.05)
    # From learning_starts on: the actor's actions, here tanh(0.5) everywhere (SAC: with a tiny std).
    weights = policy.get_weights()
    weights["policy/output/kernel"][:] = 0.0
    weights["policy/output/bias"][:] = [0.5, 0.5, -5.0, -5.0] if algorithm == "sac" else [0.5, 0.5]
    policy.set_weights(weights)
    policy.set_global_timestep(100)
    actions, _, _ = policy.compute_actions(timestep_of(obs))
    half_range = (ASYMMETRIC_ACT.high - ASYMMETRIC_ACT.low) / 2
    expected = ASYMMETRIC_ACT.low + (np.tanh(0.5) + 1.0) * half_range
    assert (np.abs(actions - expected).mean(axis=0) < 0.15 * half_range).all()


def test_ornstein_uhlenbeck_noise_is_correlated_in_time_and_restarts_at_first(tmp_path):
    policy = make_policy(
        tmp_path,
        "ddpg",
        learning_starts=0,
        exploration_noise="ornstein_uhlenbeck",
        exploration_noise_scale=0.3,
    )
    obs = np.zeros((1, 3), np.float32)
    greedy, _, _ = policy.compute_actions(timestep_of(obs), explore=False)
    noises, applied = [], []
    for step in range(400):
        step_type = StepType.FIRST if step == 200 else StepType.MID
        actions, _, _ = policy.compute_actions(timestep_of(obs, step_type))
        noises.append(policy.ou_state[0, 0])
        applied.append((actions[0, 0] - greedy[0, 0]) / 2.0)  # in half-ranges (dimension 0 spans 4)
    noises, applied = np.array(noises), np.array(applied)
    unclipped = np.abs(greedy[0, 0] / 2.0 - 0.5 + noises) < 0.9  # the action stayed inside the bounds
    assert unclipped.sum() > 100
    np.testing.assert_allclose(applied[unclipped], noises[unclipped], atol=1e-5)  # the noise is applied
    assert np.corrcoef(noises[:-1], noises[1:])[0, 1] > 0.9  # an OU process, not white noise
    one_step = 0.3 * np.sqrt(0.01)  # sigma sqrt(dt): the state right after a restart from 0
    assert abs(noises[200]) < 4 * one_step < abs(noises[150:200]).max()


def test_gaussian_exploration_noise_is_independent_between_steps(tmp_path):
    policy = make_policy(tmp_path, "td3", learning_starts=0, exploration_noise_scale=0.05)
    obs = np.zeros((1, 3), np.float32)
    greedy = policy.greedy_actions(obs)
    deltas = np.array([policy.compute_actions(timestep_of(obs))[0][0, 0] - greedy[0, 0] for _ in range(400)])
    assert abs(np.corrcoef(deltas[:-1], deltas[1:])[0, 1]) < 0.2
    assert deltas.std() == pytest.approx(0.05 * 2.0, rel=0.15)  # scale in half-ranges: dimension 0 spans 4


# ----------------------------------------------------------------------------- config and spaces


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "sac"])  # sac: discrete SAC
def test_discrete_actions_are_refused(tmp_path, algorithm, make_trainer):
    with pytest.raises(UnsupportedError, match="continuous"):
        make_trainer(raw_config(tmp_path, algorithm, env="CartPole-v1"))


def test_sac_on_discrete_actions_trains_discrete_sac(tmp_path, make_trainer):
    trainer = make_trainer(raw_config(tmp_path, "sac", env="CartPole-v1"))
    assert type(trainer.policy).__name__ == "DiscreteSACTorchPolicy"
    result = {}
    while "learner/critic_loss" not in result:  # learning starts after 16 env steps
        result = trainer.train()
    assert np.isfinite(result["learner/critic_loss"]) and result["learner/entropy"] > 0


def test_unbounded_box_actions_are_refused_with_the_reason(tmp_path):
    with pytest.raises(TypeError, match="bounded"):
        make_policy(tmp_path, "sac", action_space=Box(np.full(1, -np.inf), np.full(1, np.inf)))


@pytest.mark.parametrize(
    ("algorithm", "key", "value", "message"),
    [
        ("sac", "tau", 0.0, "training.tau"),
        ("sac", "initial_alpha", 0.0, "training.initial_alpha"),
        ("td3", "policy_delay", 0, "training.policy_delay"),
        ("td3", "target_noise", -0.1, "training.target_noise"),
        ("ddpg", "exploration_noise", "uniform", "training.exploration_noise"),
        ("ddpg", "buffer_size", 4, "training.train_batch_size"),
    ],
)
def test_config_values_out_of_range_are_errors_naming_the_key(tmp_path, algorithm, key, value, message):
    with pytest.raises(ConfigError, match=message):
        resolve(raw_config(tmp_path, algorithm, {key: value}))


def test_td3_config_differs_from_ddpgs_only_in_its_three_switches():
    from rlgear.plugins.algorithms.ddpg import DDPGConfig, TD3Config

    ddpg, td3 = DDPGConfig(), TD3Config()
    differing = {f for f in vars(ddpg) if getattr(ddpg, f) != getattr(td3, f)}
    assert differing == {"twin_q", "policy_delay", "target_noise"}
    assert set(vars(ddpg)) == set(vars(td3))


def test_fixed_alpha_is_not_a_trained_parameter(tmp_path):
    policy = make_policy(tmp_path, "sac", tune_alpha=False, initial_alpha=0.2)
    assert not policy.model.log_alpha.requires_grad
    assert all(p is not policy.model.log_alpha for p in policy.optimizer.params)
    assert float(policy.model.log_alpha.exp()) == pytest.approx(0.2)


# ----------------------------------------------------------------------------- the training step


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_training_step_learns_after_learning_starts_and_moves_the_targets(make_trainer, tmp_path, algorithm):
    trainer = make_trainer(raw_config(tmp_path, algorithm))
    result = trainer.train()  # 8 env steps < learning_starts: no gradient step
    assert trainer.policy.num_grad_updates == 0
    target = trainer.policy.get_target_weights()
    for _ in range(3):
        result = trainer.train()
    # 8 env steps x 2.0 / 8 rows = 2 gradient steps per training step, from 16 env steps on
    assert trainer.policy.num_grad_updates == 6
    assert result["learner/num_gradient_steps"] == 2
    moved = trainer.policy.get_target_weights()
    assert any(not np.array_equal(moved[k], v) for k, v in target.items())
    assert np.isfinite(result["learner/critic_loss"])


def test_prioritized_replay_gets_the_sac_td_errors_as_priorities(make_trainer, tmp_path):
    trainer = make_trainer(raw_config(tmp_path, "sac", {"prioritized_replay": True}))
    for _ in range(4):
        trainer.train()
    priorities = trainer.replay_buffer.priorities()
    assert len(np.unique(priorities)) > 8  # updated from |TD errors|, not all at the max priority


# ----------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_checkpoint_round_trip_restores_weights_targets_optimizer_and_replay(
    make_trainer, tmp_path, algorithm
):
    raw = raw_config(tmp_path, algorithm, {"prioritized_replay": algorithm == "sac"})
    trainer = make_trainer(raw)
    for _ in range(5):
        trainer.train()
    path = trainer.save()
    restored = make_trainer(raw)
    restored.restore(path)
    assert restored.timesteps_total == trainer.timesteps_total
    assert restored.policy.num_grad_updates == trainer.policy.num_grad_updates
    for getter in ("get_weights", "get_target_weights"):
        expected, actual = getattr(trainer.policy, getter)(), getattr(restored.policy, getter)()
        assert set(actual) == set(expected)
        for name in expected:
            np.testing.assert_array_equal(actual[name], expected[name], err_msg=f"{getter}: {name}")
    assert len(restored.replay_buffer) == len(trainer.replay_buffer) == 40
    # The same minibatch (same replay contents and RNG) and the same learner noise: the same step.
    minibatch = trainer.replay_buffer.sample(8)
    restored_minibatch = restored.replay_buffer.sample(8)
    np.testing.assert_array_equal(minibatch["obs"], restored_minibatch["obs"])
    trainer.policy.learn_on_batch(minibatch)
    restored.policy.learn_on_batch(restored_minibatch)
    for name, value in trainer.policy.get_weights().items():
        np.testing.assert_allclose(restored.policy.get_weights()[name], value, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_ornstein_uhlenbeck_state_and_acting_generator_are_checkpointed_exactly(
    make_trainer, tmp_path, backend
):
    if backend == "tf":
        pytest.importorskip("tensorflow")
    raw = raw_config(
        tmp_path,
        "ddpg",
        {"exploration_noise": "ornstein_uhlenbeck", "exploration_noise_scale": 0.3},
        backend=backend,
    )
    trainer = make_trainer(raw)
    for _ in range(4):
        trainer.train()
    ou_state = trainer.policy.ou_state.copy()
    assert ou_state.shape == (2, 1) and (ou_state != 0).all()  # one OU process per env slot, under way
    path = trainer.save()
    arrays, _, _, _ = ckpt.read(path)
    np.testing.assert_array_equal(arrays["policy/default/exploration/ou_state"], ou_state)  # safetensors
    restored = make_trainer(raw)
    assert restored.policy.ou_state.size == 0
    restored.restore(path)
    np.testing.assert_array_equal(restored.policy.ou_state, ou_state)
    # Mid-episode, the restored policy draws what the uninterrupted one draws next: the same weights,
    # OU state and acting generator. (The restored trainer's own envs restart their episodes, so its
    # OU processes restart from 0 at their FIRST step, as at any episode start.)
    obs = observations(2)
    for _ in range(3):
        expected, _, _ = trainer.policy.compute_actions(timestep_of(obs))
        actual, _, _ = restored.policy.compute_actions(timestep_of(obs))
        np.testing.assert_array_equal(actual, expected)
    np.testing.assert_array_equal(restored.policy.ou_state, trainer.policy.ou_state)


def test_a_checkpointed_ou_state_of_the_wrong_width_is_refused_before_anything_changes(tmp_path):
    policy = make_policy(tmp_path, "ddpg", exploration_noise="ornstein_uhlenbeck")
    state = policy.get_state()
    assert state.arrays["exploration/ou_state"].shape == (0, 2)
    state.arrays["exploration/ou_state"] = np.ones((2, 3), np.float32)
    weights = {k: v + 1.0 for k, v in policy.get_weights().items()}
    state.arrays.update({f"weights/{k}": v for k, v in weights.items()})
    before = policy.get_weights()
    with pytest.raises(
        ValueError, match=r"exploration/ou_state has shape \(2, 3\), expected \[env slots, 2\]"
    ):
        policy.set_state(state)
    for name, value in before.items():
        np.testing.assert_array_equal(policy.get_weights()[name], value, err_msg=name)


def test_policy_state_holds_the_targets_and_moves_to_a_policy_built_with_another_seed(tmp_path):
    policy = make_policy(tmp_path, "td3")
    with torch.no_grad():
        for param in policy.model.parameters():
            param.add_(0.5)  # online and target differ
    state = policy.get_state()
    targets = {k for k in state.arrays if k.startswith("target/")}
    assert targets == {f"target/{k}" for k in policy.get_weights()}  # actor and critics
    other = registry.load_algorithm("td3").policy_class("torch")(
        PENDULUM_OBS, ASYMMETRIC_ACT, resolve(raw_config(tmp_path, "td3", seed=7))
    )
    other.set_state(PolicyState(dict(state.arrays), dict(state.meta)))
    for name, value in policy.get_target_weights().items():
        np.testing.assert_array_equal(other.get_target_weights()[name], value, err_msg=name)
    assert other.acting_rng.random() == policy.acting_rng.random()


@pytest.mark.parametrize(("key", "value"), [("tune_alpha", False), ("initial_alpha", 0.5)])
def test_reset_config_refuses_alpha_keys_the_policy_reads_once_and_takes_others(
    make_trainer, tmp_path, key, value
):
    raw = raw_config(tmp_path, "sac")
    trainer = make_trainer(raw)
    changed = {**raw, "training": {**raw["training"], key: value}}
    assert trainer.reset_config(changed) is False  # the caller builds a new trainer
    assert getattr(trainer.config.training, key) != value
    other = {**raw, "training": {**raw["training"], "tau": 0.01}}
    assert trainer.reset_config(other) is True
    assert trainer.policy.config.training.tau == 0.01
