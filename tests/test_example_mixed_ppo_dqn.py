"""examples/mixed_ppo_dqn.py: agent ``a`` learns with PPO and agent ``b`` with DQN in one run, on
the tests' cooperative matching game (tests/multi_agent_envs.py: make_match)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from rlgear.errors import ConfigError, UnsupportedError
from rlgear.timestep import StepType, TimeStep

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mixed_ppo_dqn.py"
OPTIMUM = 16.0  # make_match: 2 agents x 8 steps x +1


def load_example():
    spec = importlib.util.spec_from_file_location("mixed_ppo_dqn", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def greedy_matches(policy) -> int:
    """Of the game's four targets (one-hot observations), how many the policy picks greedily."""
    n = 4
    timestep = TimeStep(
        step_type=np.full(n, int(StepType.MID), np.int32),
        reward=np.zeros(n, np.float32),
        discount=np.ones(n, np.float32),
        observation=np.eye(n, dtype=np.float32),
        prev_action=np.zeros(n, np.int64),
        env_id=np.arange(n, dtype=np.int32),
    )
    actions, _, _ = policy.compute_actions(timestep, explore=False)
    return int(np.sum(np.asarray(actions) == np.arange(n)))


def test_each_policy_is_built_and_postprocessed_by_its_own_algorithm(tmp_path):
    example = load_example()
    trainer = example.PPOAndDQN(example.cooperative_match_config())
    try:
        a, b = trainer.policy_map["a"], trainer.policy_map["b"]
        assert type(a).__name__ == "PPOTorchPolicy" and type(b).__name__ == "DQNTorchPolicy"
        assert (a.config.training.learner, b.config.training.learner) == ("ppo", "dqn")
        assert b.config.training.train_batch_size == 64 and a.config.training.train_batch_size == 256
        assert set(trainer.replay_buffers) == {"b"}
        result = trainer.train()
        assert "learner/a/policy_loss" in result  # PPO's loss on a's fresh rows
        assert result["learner/b/replay_buffer_size"] > 0  # b's transitions (n-step) in b's buffer only
        path = trainer.save(tmp_path / "checkpoint")
    finally:
        trainer.stop()
    fresh = example.PPOAndDQN(example.cooperative_match_config(seed=5))
    try:
        fresh.restore(path)  # both policies' weights come back (the replay buffer does not: see the example)
        for pid in ("a", "b"):
            saved, restored = trainer.policy_map[pid].get_weights(), fresh.policy_map[pid].get_weights()
            assert all(np.array_equal(saved[k], restored[k]) for k in saved), pid
    finally:
        fresh.stop()


def test_the_example_refuses_the_tf_backend_by_name():
    example = load_example()
    with pytest.raises(
        UnsupportedError, match=r"'ppo-and-dqn' does not support backend 'tf' \(supported: torch\)"
    ):
        example.PPOAndDQN({**example.cooperative_match_config(), "backend": "tf"})


def test_a_typo_in_the_dqn_policys_training_section_is_reported_with_its_key():
    example = load_example()
    config = example.cooperative_match_config()
    config["multiagent"]["policies"]["b"]["training"]["learning_sarts"] = 10
    with pytest.raises(
        ConfigError, match=r"multiagent\.policies\.b\.training\.learning_sarts.*learning_starts"
    ):
        example.PPOAndDQN(config)


@pytest.mark.slow
def test_both_policies_learn_the_matching_game():
    """8 s measured (9k env steps; 50 s when the machine was loaded by two other jobs): PPO's
    ``a`` and DQN's ``b`` each go from a random greedy choice to the target on all four
    observations, and the team's greedy return nears the optimum."""
    example = load_example()
    trainer = example.PPOAndDQN(example.cooperative_match_config(seed=0))
    try:
        before = {pid: greedy_matches(policy) for pid, policy in trainer.policy_map.items()}
        weights_before = {pid: policy.get_weights() for pid, policy in trainer.policy_map.items()}
        assert all(count < 4 for count in before.values()), before  # nothing is learnt yet
        for _ in range(40):
            result = trainer.train()
        after = {pid: greedy_matches(policy) for pid, policy in trainer.policy_map.items()}
        assert after == {"a": 4, "b": 4}, (before, after)
        for pid, policy in trainer.policy_map.items():  # each learnt (not only the other's partner)
            changed = policy.get_weights()
            assert any(not np.array_equal(changed[k], v) for k, v in weights_before[pid].items()), pid
        evaluation = trainer.evaluate(20)
        assert evaluation["evaluation/episode_return_mean"] >= 0.95 * OPTIMUM, evaluation
        assert result["episode_return_mean"] >= 0.8 * OPTIMUM, result  # exploring, a moving window
    finally:
        trainer.stop()
