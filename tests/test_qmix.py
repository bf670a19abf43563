"""qmix and vdn as a run: config errors, agent grouping in the rollout workers, both backends, the
episodic replay buffer, checkpoints (resuming exactly), ``rlgear.load`` and ``rlgear evaluate`` on the
team policy, torch weights on TF."""

from __future__ import annotations

import numpy as np
import pytest

import rlgear
from rlgear.discovery import registry
from rlgear.errors import RLGearError
from rlgear.sampling.agent_groups import AgentGroups
from tests.conftest import BACKENDS, needs_tf
from tests.multi_agent_envs import make_match
from tests.qmix_envs import make_two_step

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def qmix_config(algorithm: str = "qmix", env: str = "tests.multi_agent_envs:make_match", **sections) -> dict:
    """A small run on a cooperative numpy env (``make_match``: 8-step episodes, 2 agents, 4 actions)."""
    config = {
        "algorithm": algorithm,
        "seed": 3,
        "env": {"adapter": "vector", "name": env},
        "workers": {
            "num_envs_per_worker": 2,
            "batch_mode": "complete_episodes",
            "rollout_fragment_length": 16,
        },
        "training": {
            "env_steps_per_training_step": 32,
            "train_batch_size": 4,
            "learning_starts": 32,
            "max_episode_len": 8,
            "buffer_size": 50,
            "rnn_hidden_dim": 8,
            "mixing_embed_dim": 4,
            "hypernet_embed": 8,
            "target_network_update_freq": 64,
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
        ("workers", {"batch_mode": "truncate_episodes"}, "workers.batch_mode"),
        ("model", {"lstm": True}, "model.lstm"),
        ("model", {"attention": True}, "model.attention"),
        ("model", {"conv_filters": [[16, [3, 3], 1]]}, "model.conv_filters"),
        ("model", {"observation_filter": "mean_std"}, "model.observation_filter"),
        ("exploration", {"name": "rnd"}, "exploration.name"),
        ("learners", {"num_learners": 2}, "learners.num_learners"),
        (
            "multiagent",
            {"policies": {"x": {}, "y": {}}, "policy_mapping": {"a": "x", "b": "y"}},
            "multiagent.policies",
        ),
        ("training", {"n_step": 3}, "training.n_step"),
        ("training", {"prioritized_replay": True}, "training.prioritized_replay"),
        ("training", {"hypernet_layers": 3}, "training.hypernet_layers"),
        ("training", {"mixer": "qtran"}, "training.mixer"),
        ("training", {"epsilon_final": 1.5}, "training.epsilon_final"),
        ("training", {"max_episode_len": 0}, "training.max_episode_len"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(section, values, key):
    with pytest.raises(RLGearError) as raised:
        trainer_of(qmix_config(**{section: values}))
    message = str(raised.value)
    assert key in message and "\n" not in message, message


def test_an_episode_longer_than_max_episode_len_names_the_key():
    trainer = trainer_of(qmix_config(training={"max_episode_len": 5}))
    try:
        with pytest.raises(RLGearError, match=r"training\.max_episode_len"):
            trainer.train()
    finally:
        trainer.stop()


def test_a_single_agent_env_runs_as_a_team_of_one():
    """The one-agent case, as everywhere in rlgear (and what ``rlgear plugins --check`` runs)."""
    config = qmix_config(training={"max_episode_len": 500})
    config["env"] = {"adapter": "gymnasium", "name": "CartPole-v1"}
    trainer = trainer_of(config)
    try:
        assert isinstance(trainer.workers.local_worker.env, AgentGroups)
        assert trainer.workers.local_worker.env.observation_space.shape == (2, 5)  # the agent, the state
        result = trainer.train()
        assert result["episodes_total"] == len(trainer.replay_buffer) > 0
    finally:
        trainer.stop()


def test_agents_with_different_action_spaces_are_refused_naming_them():
    with pytest.raises(
        RLGearError, match=r"every agent to act in a Discrete space.*box: Box.*disc: Discrete"
    ):
        trainer_of(qmix_config(env="tests.multi_agent_envs:make_mixed"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_with_fewer_actions_never_takes_the_padding_ones(backend):
    """UnevenMatchEnv: ``a`` has 2 actions, ``b`` 4; the team acts in MultiDiscrete([4, 4]) with a's
    actions 2-3 masked, exploring uniformly at first (the env asserts a's actions are its own)."""
    trainer = trainer_of(qmix_config(env="tests.multi_agent_envs:make_uneven_match", backend=backend))
    try:
        for _ in range(4):
            result = trainer.train()
        assert result["learner/num_grad_updates"] > 0 and np.isfinite(result["learner/total_loss"])
        rows = trainer.replay_buffer.sample(8)
        filled = rows["ep_filled"] > 0
        assert rows["ep_actions"][..., 0][filled].max() <= 1 and rows["ep_actions"][..., 1][filled].max() == 3
        np.testing.assert_array_equal(rows["ep_action_mask"][..., 0, 2:][filled], False)
    finally:
        trainer.stop()


def test_vdn_is_qmix_with_the_additive_mixer():
    assert registry.load_algorithm("vdn").config_class().mixer == "vdn"
    assert registry.load_algorithm("qmix").config_class().mixer == "qmix"


# --- runs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["qmix", "vdn"])
def test_a_run_groups_the_team_stores_episodes_and_learns(backend, algorithm):
    trainer = trainer_of(qmix_config(algorithm, backend=backend))
    try:
        worker = trainer.workers.local_worker
        assert isinstance(worker.env, AgentGroups)
        for _ in range(3):
            result = trainer.train()
        buffer = trainer.replay_buffer
        # one row per whole team episode (8 env steps each)
        assert len(buffer) == result["episodes_total"] == result["timesteps_total"] // 8
        rows = buffer.sample(3)
        assert rows["ep_obs"].shape == (3, 9, 3, 9) and rows["ep_filled"].sum(axis=1).tolist() == [8.0] * 3
        assert result["learner/num_grad_updates"] > 0
        assert result["learner/epsilon"] < 1.0
        assert result["episode_len_mean"] == 8
        weights = trainer.policy.get_weights()
        assert all(name.startswith(("agent/", "mixer/")) for name in weights)
        assert any(name.startswith("mixer/") for name in weights) == (algorithm == "qmix")
    finally:
        trainer.stop()


def test_the_episode_return_is_the_team_return_the_buffer_holds():
    """``episode_return_mean`` is the mean over episodes of the team's summed reward: the same
    figure as the stored episodes' rewards (make_match pays both agents 1 per matched step, so each
    team return is even)."""
    trainer = trainer_of(qmix_config())
    try:
        result = trainer.train()  # 4 episodes, all in the buffer and in the metrics window
        arrays, _ = trainer.replay_buffer.get_state()
        returns = arrays["columns/ep_rewards"].sum(axis=1)
        assert len(returns) == result["episodes_total"] == 4
        assert result["episode_return_mean"] == pytest.approx(returns.mean())
        assert np.all(returns % 2 == 0)
    finally:
        trainer.stop()


def test_target_networks_are_copied_every_target_network_update_freq_env_steps():
    trainer = trainer_of(qmix_config())
    try:
        results = [trainer.train() for _ in range(3)]
        assert [r["learner/num_target_updates"] for r in results] == [0.0, 1.0, 1.0]
        policy = trainer.policy
        online, target = policy.get_weights(), policy.get_target_weights()
        assert any(np.any(online[k] != target[k]) for k in online)  # learned since the copy at 64
        assert trainer.train()["learner/num_target_updates"] == 2.0  # at 128 env steps
        online, target = policy.get_weights(), policy.get_target_weights()
        assert all(np.array_equal(online[k], target[k]) for k in online)
    finally:
        trainer.stop()


def test_reset_config_takes_new_hyperparameters_but_not_new_networks():
    config = qmix_config()
    trainer = trainer_of(config)
    try:
        assert trainer.reset_config({**config, "training": {**config["training"], "lr": 1e-3}})
        assert trainer.config.training.lr == 1e-3
        for key, value in (("rnn_hidden_dim", 16), ("max_episode_len", 9), ("mixer", "vdn")):
            assert not trainer.reset_config({**config, "training": {**config["training"], key: value}})
    finally:
        trainer.stop()


# --- checkpoints, load, evaluate -----------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("standardise", [False, True], ids=["plain", "standardised-rewards"])
def test_checkpoint_round_trip_resumes_learning_identically(tmp_path, backend, standardise):
    """With standardise_rewards the reward statistics travel too: the resumed learning steps (which
    push more rewards into them) give the same loss and weights bit for bit."""
    config = qmix_config(
        backend=backend, training={"standardise_rewards": standardise, "bootstrap_truncated": not standardise}
    )
    trainer = trainer_of(config)
    try:
        for _ in range(2):
            trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        timesteps = trainer.timesteps_total
        expected = trainer.learn_from_replay(3, timesteps)
        expected_weights = trainer.policy.get_weights()
        expected_target = trainer.policy.get_target_weights()
        expected_epsilon = trainer.policy.epsilon()
    finally:
        trainer.stop()
    fresh = trainer_of(config)
    try:
        fresh.restore(path)
        assert len(fresh.replay_buffer) == 8  # two training steps of 4 episodes
        assert fresh.num_target_updates == 1
        stats = fresh.learn_from_replay(3, timesteps)
        assert stats["total_loss"] == expected["total_loss"]
        weights = fresh.policy.get_weights()
        for name, value in expected_weights.items():
            np.testing.assert_array_equal(weights[name], value, err_msg=name)
        for name, value in fresh.policy.get_target_weights().items():
            np.testing.assert_array_equal(value, expected_target[name], err_msg=name)
        assert fresh.policy.epsilon() == expected_epsilon
        if standardise:
            assert stats["reward_mean"] == expected["reward_mean"] and fresh.policy.reward_stats.count > 0
    finally:
        fresh.stop()


def test_load_and_evaluate_act_with_the_team_policy(tmp_path):
    trainer = trainer_of(qmix_config(env="tests.qmix_envs:make_two_step", training={"max_episode_len": 2}))
    try:
        for _ in range(2):
            trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        policy = trainer.policy
        env = AgentGroups(make_two_step(3))
        first = env.reset()
        expected_first, state, _ = policy.compute_actions(first, policy.get_initial_state(3), explore=False)
        second = env.step(expected_first)
        expected_second, _, _ = policy.compute_actions(second, state, explore=False)
    finally:
        trainer.stop()
    loaded = rlgear.load(path)
    np.testing.assert_array_equal(
        loaded.compute_actions(first.observation, episode_start=True), expected_first
    )
    np.testing.assert_array_equal(loaded.compute_actions(second.observation), expected_second)
    from rlgear.run.agent import evaluate_checkpoint

    evaluation = evaluate_checkpoint(path, episodes=2)
    assert [episode["length"] for episode in evaluation.episodes] == [2, 2]


def test_export_is_refused_with_a_message(tmp_path):
    trainer = trainer_of(qmix_config())
    try:
        with pytest.raises(RLGearError, match=r"rlgear\.load"):
            trainer.policy.export_head(False)
    finally:
        trainer.stop()


@needs_tf
@pytest.mark.parametrize("algorithm", ["qmix", "vdn"])
def test_a_torch_checkpoint_acts_and_learns_the_same_on_tf(tmp_path, algorithm):
    torch_trainer = trainer_of(qmix_config(algorithm, backend="torch"))
    try:
        for _ in range(2):
            torch_trainer.train()
        path = torch_trainer.save(tmp_path / "ckpt")
        source = torch_trainer.policy
        rows = torch_trainer.replay_buffer.sample(4)
    finally:
        torch_trainer.stop()
    tf_trainer = trainer_of(qmix_config(algorithm, backend="tf"))
    try:
        tf_trainer.restore(path)
        target = tf_trainer.policy
        assert sorted(target.get_weights()) == sorted(source.get_weights())
        team = AgentGroups(make_match(4))
        timestep = team.reset(seed=0)
        a, _, _ = source.compute_actions(timestep, None, explore=False)
        b, _, _ = target.compute_actions(timestep, None, explore=False)
        np.testing.assert_array_equal(a, b)
        torch_stats = source.learn_on_batch(rows)
        tf_stats = target.learn_on_batch(rows)
        assert tf_stats["total_loss"] == pytest.approx(torch_stats["total_loss"], rel=1e-4)
    finally:
        tf_trainer.stop()


@pytest.mark.slow
def test_remote_workers_group_the_team_and_sample_whole_episodes(ray_session):
    """About 10 s (a local Ray, one remote worker): the remote worker builds the same team env, its
    episodes fill the driver's buffer, and it acts with the learner's weights."""
    trainer = trainer_of(qmix_config(workers={"num_workers": 1}))
    try:
        result = trainer.train()
        assert len(trainer.replay_buffer) == result["episodes_total"] > 0
        (grouped,) = trainer.workers.foreach_worker(lambda w: type(w.env).__name__)[1:]
        assert grouped == "AgentGroups"
        local = trainer.workers.local_worker.get_weights()
        (remote,) = trainer.workers.foreach_worker(lambda w: w.get_weights())[1:]
        assert local and sorted(remote) == sorted(local)  # the team's one policy: flat weights
        for key, value in local.items():
            np.testing.assert_array_equal(remote[key], value, err_msg=key)
    finally:
        trainer.stop()
