"""masac as a run: config errors, agent grouping of a Box team, sampled decentralised actions (the
numpy twin's greedy action is the torch actor's), SAC's temperature, checkpoints (resuming exactly),
``rlgear.load`` on the team policy."""

from __future__ import annotations

import numpy as np
import pytest

import rlgear
from rlgear.errors import RLGearError
from rlgear.sampling.agent_groups import AgentGroups
from tests.conftest import BACKENDS, needs_tf
from tests.maddpg_envs import make_line_sum, make_uneven_line_sum
from tests.test_maddpg import maddpg_config, trainer_of

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def masac_config(**sections) -> dict:
    """maddpg's small run (2 agents on the line task, minibatches of 8, 32 gradient steps per 16 env steps)."""
    return maddpg_config("masac", **sections)


@pytest.mark.parametrize(
    ("section", "values", "key"),
    [
        ("model", {"lstm": True}, "model.lstm"),
        ("exploration", {"name": "rnd"}, "exploration.name"),
        (
            "multiagent",
            {"policies": {"x": {}, "y": {}}, "policy_mapping": {"a": "x", "b": "y"}},
            "multiagent.policies",
        ),
        ("training", {"her_strategy": "future"}, "training.her_strategy"),
        ("training", {"use_sde": True}, "training.use_sde"),
        ("training", {"initial_alpha": 0.0}, "training.initial_alpha"),
        ("training", {"agent_id": "yes"}, "training.agent_id"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(section, values, key):
    with pytest.raises(RLGearError) as raised:
        trainer_of(masac_config(**{section: values}))
    message = str(raised.value)
    assert key in message and "\n" not in message, message


def test_discrete_agents_are_refused_with_one_line():
    with pytest.raises(RLGearError) as raised:
        trainer_of(masac_config(env="tests.multi_agent_envs:make_match"))
    message = str(raised.value)
    assert "Box action" in message and "masac" in message and "\n" not in message, message


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_groups_the_team_samples_per_agent_and_tunes_one_temperature(backend):
    trainer = trainer_of(masac_config(backend=backend))
    try:
        assert isinstance(trainer.workers.local_worker.env, AgentGroups)
        for _ in range(3):
            result = trainer.train()
        rows = trainer.replay_buffer.sample(4)
        assert rows["obs"].shape == (4, 3, 4) and rows["actions"].shape == (4, 2, 1)
        assert result["learner/num_grad_updates"] > 0 and result["episode_len_mean"] == 8
        assert result["learner/alpha"] < 1.0  # tuned down from initial_alpha towards -1 per agent
        weights = trainer.policy.get_weights()
        assert weights["policy/hidden_0/kernel"].shape == (2 + 2, 16)  # own observation + agent id
        assert weights["policy/output/kernel"].shape == (16, 2)  # one agent's mean and log std
        assert weights["q/hidden_0/kernel"].shape == (2, 3 + 2, 16)  # twin critics on state + joint action
        assert weights["log_alpha"].shape == (1,)
        timestep = AgentGroups(make_line_sum(64)).reset(seed=2)
        greedy, _, _ = trainer.policy.compute_actions(timestep, None, explore=False)
        np.testing.assert_allclose(greedy, trainer.policy.greedy_actions(timestep.observation), atol=1e-5)
        sampled, _, _ = trainer.policy.compute_actions(timestep, None, explore=True)
        assert sampled.shape == greedy.shape == (64, 2, 1) and np.abs(sampled - greedy).max() > 1e-3
        assert np.abs(sampled).max() <= 1.0  # the line task's bounds
    finally:
        trainer.stop()


def test_agents_of_different_action_widths_act_and_learn_with_the_padding_zeroed():
    trainer = trainer_of(masac_config(env="tests.maddpg_envs:make_uneven_line_sum"))
    try:
        for _ in range(3):
            result = trainer.train()
        assert np.isfinite(result["learner/critic_loss"]) and np.isfinite(result["learner/actor_loss"])
        rows = trainer.replay_buffer.sample(16)
        np.testing.assert_array_equal(rows["actions"][:, 0, 1], 0.0)
        timestep = AgentGroups(make_uneven_line_sum(8)).reset(seed=1)
        sampled, _, _ = trainer.policy.compute_actions(timestep, None, explore=True)
        np.testing.assert_array_equal(sampled[:, 0, 1], 0.0)
    finally:
        trainer.stop()


def test_a_single_agent_env_runs_as_a_team_of_one():
    config = masac_config()
    config["env"] = {"adapter": "gymnasium", "name": "Pendulum-v1"}
    trainer = trainer_of(config)
    try:
        assert trainer.train()["timesteps_total"] > 0
    finally:
        trainer.stop()


def test_reset_config_takes_new_hyperparameters_but_not_new_networks():
    config = masac_config()
    trainer = trainer_of(config)
    try:
        assert trainer.reset_config({**config, "training": {**config["training"], "lr": 1e-4}})
        assert trainer.config.training.lr == 1e-4
        for key, value in (("agent_id", False), ("tune_alpha", False)):
            assert not trainer.reset_config({**config, "training": {**config["training"], key: value}})
    finally:
        trainer.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_round_trip_resumes_learning_identically(tmp_path, backend):
    config = masac_config(backend=backend)
    trainer = trainer_of(config)
    try:
        for _ in range(3):
            trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        timesteps = trainer.timesteps_total
        expected = trainer.learn_from_replay(3, timesteps)
        expected_weights = trainer.policy.get_weights()
        expected_target = trainer.policy.get_target_weights()
    finally:
        trainer.stop()
    fresh = trainer_of(config)
    try:
        fresh.restore(path)
        stats = fresh.learn_from_replay(3, timesteps)
        assert stats["total_loss"] == expected["total_loss"]
        weights = fresh.policy.get_weights()
        for name, value in expected_weights.items():
            np.testing.assert_array_equal(weights[name], value, err_msg=name)
        for name, value in fresh.policy.get_target_weights().items():
            np.testing.assert_array_equal(value, expected_target[name], err_msg=name)
    finally:
        fresh.stop()


def test_load_acts_with_the_team_policy_and_export_is_refused(tmp_path):
    trainer = trainer_of(masac_config())
    try:
        for _ in range(3):
            trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        timestep = AgentGroups(make_line_sum(3)).reset(seed=4)
        expected, _, _ = trainer.policy.compute_actions(timestep, None, explore=False)
        with pytest.raises(RLGearError, match=r"rlgear\.load"):
            trainer.policy.export_head(False)
    finally:
        trainer.stop()
    loaded = rlgear.load(path)
    np.testing.assert_array_equal(loaded.compute_actions(timestep.observation), expected)


class ReplayedDraws:
    """A stand-in for the TF policy's noise generator that hands out given draws, in order."""

    def __init__(self, draws):
        self.draws = list(draws)

    def standard_normal(self, shape, dtype=None):
        draw = self.draws.pop(0)
        assert draw.shape == tuple(shape)
        return draw


@needs_tf
def test_a_torch_checkpoint_acts_and_learns_the_same_on_tf(tmp_path):
    torch_trainer = trainer_of(masac_config(backend="torch"))
    try:
        for _ in range(3):
            torch_trainer.train()
        path = torch_trainer.save(tmp_path / "ckpt")
        source = torch_trainer.policy
        rows = torch_trainer.replay_buffer.sample(8)
    finally:
        torch_trainer.stop()
    tf_trainer = trainer_of(masac_config(backend="tf"))
    try:
        tf_trainer.restore(path)
        target = tf_trainer.policy
        assert sorted(target.get_weights()) == sorted(source.get_weights())
        timestep = AgentGroups(make_line_sum(4)).reset(seed=0)
        a, _, _ = source.compute_actions(timestep, None, explore=False)
        b, _, _ = target.compute_actions(timestep, None, explore=False)
        np.testing.assert_array_equal(a, b)
        # the same draws on both: TF's noise as the torch policy drew it (another backend's checkpoint
        # brings the weights, not the optimizer state: the targets restart from the online weights)
        source.update_target(1.0)
        torch_stats = source.learn_on_batch(rows)
        target.noise_rng = ReplayedDraws([np.asarray(t) for t in source.last_noise])
        tf_stats = target.learn_on_batch(rows)
        assert tf_stats["critic_loss"] == pytest.approx(torch_stats["critic_loss"], rel=1e-4)
        assert tf_stats["total_loss"] == pytest.approx(torch_stats["total_loss"], rel=1e-4, abs=1e-5)
    finally:
        tf_trainer.stop()
