"""maddpg and matd3 as a run: config errors, agent grouping of a Box team in the rollout workers,
decentralised actions, both backends, checkpoints (resuming exactly), ``rlgear.load`` on the team
policy, torch weights acting and learning the same on TF."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import rlgear
from rlgear.discovery import registry
from rlgear.errors import RLGearError
from rlgear.sampling.agent_groups import AgentGroups
from tests.conftest import BACKENDS, needs_tf
from tests.maddpg_envs import make_line_sum, make_uneven_line_sum

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def maddpg_config(
    algorithm: str = "maddpg", env: str = "tests.maddpg_envs:make_line_sum", **sections
) -> dict:
    """A small run on the cooperative line task (8-step episodes, 2 agents, one action each)."""
    config = {
        "algorithm": algorithm,
        "seed": 3,
        "env": {"adapter": "vector", "name": env},
        "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 8},
        "model": {"hidden_sizes": [16, 16]},
        "training": {
            "env_steps_per_training_step": 16,
            "train_batch_size": 8,
            "learning_starts": 16,
            "buffer_size": 200,
            # 32 gradient steps per 16 env steps (DDPG's default, 256 rows per env step, makes 512 on
            # these minibatches of 8: the cost of these tests, for nothing they check)
            "training_intensity": 16.0,
        },
        "logging": {"tensorboard": False, "progress": "none"},
    }
    for key, value in sections.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return config


def trainer_of(config: dict):
    return registry.load_algorithm(config["algorithm"])(config)


# --- config ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("section", "values", "key"),
    [
        ("model", {"lstm": True}, "model.lstm"),
        ("model", {"conv_filters": [[16, [3, 3], 1]]}, "model.conv_filters"),
        ("model", {"observation_filter": "mean_std"}, "model.observation_filter"),
        ("exploration", {"name": "rnd"}, "exploration.name"),
        ("learners", {"num_learners": 2}, "learners.num_learners"),
        (
            "multiagent",
            {"policies": {"x": {}, "y": {}}, "policy_mapping": {"a": "x", "b": "y"}},
            "multiagent.policies",
        ),
        ("training", {"her_strategy": "future"}, "training.her_strategy"),
        ("training", {"tau": 0.0}, "training.tau"),
        ("training", {"policy_delay": 0}, "training.policy_delay"),
        ("training", {"agent_id": "yes"}, "training.agent_id"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(section, values, key):
    with pytest.raises(RLGearError) as raised:
        trainer_of(maddpg_config(**{section: values}))
    message = str(raised.value)
    assert key in message and "\n" not in message, message


def test_discrete_agents_are_refused_with_one_line():
    with pytest.raises(RLGearError) as raised:
        trainer_of(maddpg_config(env="tests.multi_agent_envs:make_match"))
    message = str(raised.value)
    assert "Box action" in message and "maddpg" in message and "\n" not in message, message


def test_agents_with_different_action_spaces_are_refused_naming_them():
    with pytest.raises(RLGearError, match=r"box: Box.*disc: Discrete"):
        trainer_of(maddpg_config(env="tests.multi_agent_envs:make_mixed"))


def test_matd3_is_maddpg_with_td3s_defaults():
    matd3, td3 = (
        registry.load_algorithm("matd3").config_class(),
        registry.load_algorithm("td3").config_class(),
    )
    assert (matd3.twin_q, matd3.policy_delay, matd3.target_noise) == (
        td3.twin_q,
        td3.policy_delay,
        td3.target_noise,
    )
    maddpg = registry.load_algorithm("maddpg").config_class()
    assert (maddpg.twin_q, maddpg.policy_delay, maddpg.target_noise) == (False, 1, 0.0)
    assert matd3.agent_id and maddpg.agent_id


# --- acting ---------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_each_agent_acts_on_its_own_observation_only(backend):
    """Decentralised execution: changing agent 1's row (or the state row) leaves agent 0's action as it
    was; the numpy acting twin equals the framework's actor."""
    trainer = trainer_of(maddpg_config(backend=backend))
    try:
        policy = trainer.policy
        env = AgentGroups(make_line_sum(4))
        timestep = env.reset(seed=1)
        actions, _, _ = policy.compute_actions(timestep, None, explore=False)
        assert actions.shape == (4, 2, 1) and actions.dtype == np.float32
        np.testing.assert_allclose(actions, policy.greedy_actions(timestep.observation), rtol=1e-5, atol=1e-6)
        changed = timestep.observation.copy()
        changed[:, 1, 1:3] += 0.7  # agent 1's observation
        changed[:, 2, 1:4] -= 0.3  # the state row
        again, _, _ = policy.compute_actions(
            dataclasses.replace(timestep, observation=changed), None, explore=False
        )
        np.testing.assert_array_equal(again[:, 0], actions[:, 0])
        assert not np.allclose(again[:, 1], actions[:, 1])
    finally:
        trainer.stop()


def test_exploring_actions_are_within_the_bounds_and_noisy_per_agent():
    trainer = trainer_of(maddpg_config(training={"learning_starts": 0, "exploration_noise_scale": 0.5}))
    try:
        policy = trainer.policy
        timestep = AgentGroups(make_line_sum(64)).reset(seed=2)
        greedy, _, _ = policy.compute_actions(timestep, None, explore=False)
        explored, _, _ = policy.compute_actions(timestep, None, explore=True)
        assert np.all(np.abs(explored) <= 1.0)
        noise = (explored - greedy)[..., 0]
        unclipped = np.abs(explored[..., 0]) < 1.0
        both = unclipped.all(axis=1)
        assert abs(np.corrcoef(noise[both, 0], noise[both, 1])[0, 1]) < 0.4  # independent per agent
    finally:
        trainer.stop()


# --- runs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["maddpg", "matd3"])
def test_a_run_groups_the_team_replays_joint_actions_and_learns(backend, algorithm):
    trainer = trainer_of(maddpg_config(algorithm, backend=backend))
    try:
        worker = trainer.workers.local_worker
        assert isinstance(worker.env, AgentGroups)
        for _ in range(3):
            result = trainer.train()
        rows = trainer.replay_buffer.sample(4)
        assert rows["obs"].shape == (4, 3, 4) and rows["actions"].shape == (4, 2, 1)
        assert result["learner/num_grad_updates"] > 0
        assert result["episode_len_mean"] == 8
        weights = trainer.policy.get_weights()
        assert all(name.startswith(("policy/", "q/")) for name in weights)
        assert weights["policy/hidden_0/kernel"].shape == (2 + 2, 16)  # own observation + agent id
        assert weights["q/hidden_0/kernel"].shape == ((2 if algorithm == "matd3" else 1), 3 + 2, 16)
    finally:
        trainer.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_agents_of_different_action_widths_act_and_learn_with_the_padding_zeroed(backend):
    """``a`` acts in Box(1), ``b`` in Box(2) with other bounds: the env asserts each receives its
    own shape within its bounds; the replayed team actions and the greedy ones have a's padding 0."""
    trainer = trainer_of(maddpg_config(env="tests.maddpg_envs:make_uneven_line_sum", backend=backend))
    try:
        for _ in range(3):
            result = trainer.train()
        assert result["learner/num_grad_updates"] > 0
        assert np.isfinite(result["learner/critic_loss"]) and np.isfinite(result["learner/actor_loss"])
        rows = trainer.replay_buffer.sample(16)
        assert rows["actions"].shape == (16, 2, 2)
        np.testing.assert_array_equal(rows["actions"][:, 0, 1], 0.0)
        assert np.abs(rows["actions"][:, 1]).max() <= 0.5 and np.abs(rows["actions"][:, 1, 1]).max() > 0
        timestep = AgentGroups(make_uneven_line_sum(8)).reset(seed=1)
        greedy, _, _ = trainer.policy.compute_actions(timestep, None, explore=False)
        np.testing.assert_array_equal(greedy[:, 0, 1], 0.0)
        np.testing.assert_array_equal(trainer.policy.greedy_actions(timestep.observation)[:, 0, 1], 0.0)
    finally:
        trainer.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_prioritized_n_step_replay_runs_on_team_rows(backend):
    """DDPG's replay options apply unchanged: n-step team returns, priorities from the team's TD errors."""
    config = maddpg_config(backend=backend, training={"prioritized_replay": True, "n_step": 3})
    trainer = trainer_of(config)
    try:
        for _ in range(3):
            result = trainer.train()
        assert result["learner/num_grad_updates"] > 0 and np.isfinite(result["learner/critic_loss"])
        assert len(np.unique(trainer.policy.td_errors)) > 1
    finally:
        trainer.stop()


def test_a_single_agent_env_runs_as_a_team_of_one():
    """The one-agent case, as everywhere in rlgear (and what ``rlgear plugins --check`` runs)."""
    config = maddpg_config()
    config["env"] = {"adapter": "gymnasium", "name": "Pendulum-v1"}
    trainer = trainer_of(config)
    try:
        assert trainer.workers.local_worker.env.observation_space.shape == (2, 4)  # the agent, the state
        assert trainer.train()["timesteps_total"] > 0
    finally:
        trainer.stop()


def test_reset_config_takes_new_hyperparameters_but_not_new_networks():
    config = maddpg_config()
    trainer = trainer_of(config)
    try:
        assert trainer.reset_config({**config, "training": {**config["training"], "lr": 1e-4}})
        assert trainer.config.training.lr == 1e-4
        for key, value in (("agent_id", False), ("twin_q", True)):
            assert not trainer.reset_config({**config, "training": {**config["training"], key: value}})
    finally:
        trainer.stop()


# --- checkpoints, load --------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_round_trip_resumes_learning_identically(tmp_path, backend):
    config = maddpg_config("matd3", backend=backend, training={"exploration_noise": "ornstein_uhlenbeck"})
    trainer = trainer_of(config)
    try:
        for _ in range(3):
            trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        expected_ou = trainer.policy.ou_state.copy()  # [env slots, n x A]: one process per agent
        timesteps = trainer.timesteps_total
        expected = trainer.learn_from_replay(3, timesteps)
        expected_weights = trainer.policy.get_weights()
        expected_target = trainer.policy.get_target_weights()
    finally:
        trainer.stop()
    fresh = trainer_of(config)
    try:
        fresh.restore(path)
        np.testing.assert_array_equal(fresh.policy.ou_state, expected_ou)
        stats = fresh.learn_from_replay(3, timesteps)
        assert stats["total_loss"] == expected["total_loss"]
        weights = fresh.policy.get_weights()
        for name, value in expected_weights.items():
            np.testing.assert_array_equal(weights[name], value, err_msg=name)
        for name, value in fresh.policy.get_target_weights().items():
            np.testing.assert_array_equal(value, expected_target[name], err_msg=name)
        assert expected_ou.shape == (2, 2) and np.any(expected_ou != 0)
    finally:
        fresh.stop()


def test_load_acts_with_the_team_policy(tmp_path):
    trainer = trainer_of(maddpg_config())
    try:
        for _ in range(3):
            trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        policy = trainer.policy
        timestep = AgentGroups(make_line_sum(3)).reset(seed=4)
        expected, _, _ = policy.compute_actions(timestep, None, explore=False)
    finally:
        trainer.stop()
    loaded = rlgear.load(path)
    np.testing.assert_array_equal(loaded.compute_actions(timestep.observation), expected)
    single = loaded.compute_single_action(timestep.observation[1])
    np.testing.assert_array_equal(single, expected[1])
    from rlgear.run.agent import evaluate_checkpoint

    evaluation = evaluate_checkpoint(path, episodes=2)
    assert [episode["length"] for episode in evaluation.episodes] == [8, 8]


def test_export_is_refused_with_a_message():
    trainer = trainer_of(maddpg_config())
    try:
        with pytest.raises(RLGearError, match=r"rlgear\.load"):
            trainer.policy.export_head(False)
    finally:
        trainer.stop()


@needs_tf
@pytest.mark.parametrize("algorithm", ["maddpg", "matd3"])
def test_a_torch_checkpoint_acts_and_learns_the_same_on_tf(tmp_path, algorithm):
    torch_trainer = trainer_of(maddpg_config(algorithm, backend="torch"))
    try:
        for _ in range(3):
            torch_trainer.train()
        path = torch_trainer.save(tmp_path / "ckpt")
        source = torch_trainer.policy
        rows = torch_trainer.replay_buffer.sample(8)
    finally:
        torch_trainer.stop()
    tf_trainer = trainer_of(maddpg_config(algorithm, backend="tf"))
    try:
        tf_trainer.restore(path)
        target = tf_trainer.policy
        assert sorted(target.get_weights()) == sorted(source.get_weights())
        timestep = AgentGroups(make_line_sum(4)).reset(seed=0)
        a, _, _ = source.compute_actions(timestep, None, explore=False)
        b, _, _ = target.compute_actions(timestep, None, explore=False)
        np.testing.assert_array_equal(a, b)
        # another backend's checkpoint brings the weights, not the optimizer state: the target copies
        # restart from the online weights (rlgear.run.trainer_state), so the source's do too
        source.update_target(1.0)
        if algorithm == "matd3":  # the same target smoothing draws on both
            target.noise_shapes = lambda rows: []
            source.config.training.target_noise = target.config.training.target_noise = 0.0
        torch_stats = source.learn_on_batch(rows)
        tf_stats = target.learn_on_batch(rows)
        assert tf_stats["critic_loss"] == pytest.approx(torch_stats["critic_loss"], rel=1e-4)
        assert tf_stats["total_loss"] == pytest.approx(torch_stats["total_loss"], rel=1e-4, abs=1e-5)
    finally:
        tf_trainer.stop()


@pytest.mark.slow
def test_remote_workers_group_the_box_team_and_act_with_the_learners_weights(ray_session):
    """About 10 s (a local Ray, one remote worker): the remote worker builds the same team env, its
    steps fill the driver's buffer, and it acts with the learner's weights."""
    trainer = trainer_of(maddpg_config(workers={"num_workers": 1}))
    try:
        for _ in range(2):
            result = trainer.train()
        assert len(trainer.replay_buffer) == result["timesteps_total"] > 0
        (grouped,) = trainer.workers.foreach_worker(lambda w: type(w.env).__name__)[1:]
        assert grouped == "AgentGroups"
        local = trainer.workers.local_worker.get_weights()
        (remote,) = trainer.workers.foreach_worker(lambda w: w.get_weights())[1:]
        assert local and sorted(remote) == sorted(local)
        for key, value in local.items():
            np.testing.assert_array_equal(remote[key], value, err_msg=key)
    finally:
        trainer.stop()
