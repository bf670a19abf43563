"""The Learner contract: learning apart from acting, built from the config and the spaces alone."""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import Learner
from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.plugins.algorithms.dqn import DQN
from rlgear.plugins.algorithms.ppo import PPO
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
from rlgear.sampling.postprocessing import add_gae, trainable_rows
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType
from tests.conftest import small_config

pytest.importorskip("torch")

CARTPOLE_SPACES = (Box(np.full(4, -np.inf), np.full(4, np.inf)), Discrete(2))


def ppo_rows(n: int, seed: int = 0) -> SampleBatch:
    """A postprocessed on-policy batch of ``n`` rows made up without any env: what a rollout worker
    would send (observations, actions, the behaviour policy's log-probabilities and values, GAE)."""
    rng = np.random.default_rng(seed)
    steps = np.full((n + 1, 1), int(StepType.MID), dtype=np.int32)
    steps[0] = int(StepType.FIRST)
    fragment = {
        SampleBatch.OBS: rng.normal(size=(n + 1, 1, 4)).astype(np.float32),
        SampleBatch.ACTIONS: rng.integers(2, size=(n + 1, 1)),
        SampleBatch.REWARDS: np.ones((n + 1, 1), dtype=np.float32),
        SampleBatch.DISCOUNTS: np.ones((n + 1, 1), dtype=np.float32),
        SampleBatch.STEP_TYPES: steps,
        SampleBatch.ACTION_LOGP: np.full((n + 1, 1), np.log(0.5), dtype=np.float32),
        SampleBatch.VF_PREDS: rng.normal(size=(n + 1, 1)).astype(np.float32),
    }
    return trainable_rows(add_gae(SampleBatch(fragment), gamma=0.99, gae_lambda=0.95))


def test_a_learner_is_built_and_updated_with_no_env(tmp_path, monkeypatch):
    config = config_mod.resolve(small_config(tmp_path), training_class=PPO.config_class)
    # any env made from here on would be a bug: the learner needs the spaces, not the env
    monkeypatch.setattr(registry, "load_env_adapter", lambda *a, **k: pytest.fail("the learner made an env"))
    learner = Learner.build(config, PPO.policy_class("torch"), CARTPOLE_SPACES)
    assert list(learner.policy_map) == ["default"]
    before = {k: v.copy() for k, v in learner.get_weights().items()}
    stats = learner.update(ppo_rows(64))
    after = learner.get_weights()
    assert set(before) == set(after)
    assert any(not np.array_equal(before[k], after[k]) for k in before), "the update changed no weight"
    assert stats["num_grad_updates"] == 4  # 2 epochs of 64 rows in minibatches of 32
    assert all(np.isfinite(v) for v in stats.values())


def test_a_learner_builds_one_policy_per_id_with_its_overrides_and_trains_each_on_its_rows(tmp_path):
    raw = small_config(
        tmp_path,
        multiagent={
            "policies": {"a": {"training": {"lr": 0.01}}, "b": {}},
            "policy_mapping": {"a_*": "a", "*": "b"},
            "policies_to_train": ["a"],
        },
    )
    config = config_mod.resolve(raw, training_class=PPO.config_class)
    learner = Learner.build(config, PPO.policy_class("torch"), {"a": CARTPOLE_SPACES, "b": CARTPOLE_SPACES})
    assert sorted(learner.policy_map) == ["a", "b"]
    assert learner.policy_map["a"].config.training.lr == 0.01
    assert learner.policy_map["b"].config.training.lr == config.training.lr
    assert learner.policies_to_train == ["a"]
    b_before = {k: v.copy() for k, v in learner.get_weights()["b"].items()}
    stats = learner.update(MultiAgentBatch({"a": ppo_rows(64), "b": ppo_rows(64, seed=1)}, env_steps=64))
    assert stats and all(key.startswith("a/") for key in stats)  # b is not trained
    assert all(np.array_equal(b_before[k], v) for k, v in learner.get_weights()["b"].items())
    with pytest.raises(Exception, match=r"use learner\.policy_map"):
        learner.policy  # noqa: B018


def test_learner_state_round_trips_weights_and_optimizer_into_a_fresh_learner(tmp_path):
    config = config_mod.resolve(small_config(tmp_path), training_class=PPO.config_class)
    learner = Learner.build(config, PPO.policy_class("torch"), CARTPOLE_SPACES)
    learner.update(ppo_rows(64))
    state = learner.get_state()
    fresh = Learner.build(
        config_mod.resolve(small_config(tmp_path, seed=7), training_class=PPO.config_class),
        PPO.policy_class("torch"),
        CARTPOLE_SPACES,
    )
    fresh.set_state(state)
    for name, value in learner.get_weights().items():
        np.testing.assert_array_equal(fresh.get_weights()[name], value)
    # same weights and optimizer moments: the same next update
    learner.policy.rng = np.random.default_rng(0)  # the same minibatch order in both
    fresh.policy.rng = np.random.default_rng(0)
    learner.update(ppo_rows(64, seed=3))
    fresh.update(ppo_rows(64, seed=3))
    for name, value in learner.get_weights().items():
        np.testing.assert_allclose(fresh.get_weights()[name], value, rtol=1e-6, atol=1e-7)


def test_a_replay_learner_is_built_from_spaces_alone(tmp_path):
    raw = small_config(tmp_path, algorithm="dqn")
    del raw["training"]
    config = config_mod.resolve(raw, training_class=DQN.config_class)
    learner = Learner.build(config, DQN.policy_class("torch"), CARTPOLE_SPACES)
    assert set(learner.get_weights())  # the Q-network's weights, neutral names
    assert learner.policy.action_space == Discrete(2)


def test_the_trainer_learns_through_its_learner_and_its_workers_act_with_the_learners_weights(tmp_path):
    trainer = PPO(small_config(tmp_path))
    try:
        assert trainer.policy_map is trainer.learner.policy_map
        assert trainer.policy is trainer.learner.policy
        calls = []
        update = trainer.learner.update
        trainer.learner.update = lambda batch: calls.append(len(batch)) or update(batch)
        result = trainer.train()
        assert calls, "the training step did not go through Learner.update"
        assert "learner/total_loss" in result
        acting = trainer.workers.local_worker.policy
        for name, value in trainer.learner.get_weights().items():
            np.testing.assert_array_equal(acting.get_weights()[name], value)
    finally:
        trainer.stop()
