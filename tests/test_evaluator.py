"""Sampling: fragments overlap by exactly one bootstrap row; nothing is lost or duplicated."""

from __future__ import annotations

import itertools
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.plugins.algorithms.ppo import PPO
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.rollout_worker import RolloutWorker
from rlgear.timestep import StepType
from tests.conftest import small_config

SCRIPTED = "tests.test_gymnasium_timesteps:ScriptedEnv"


def make_evaluator(
    tmp_path, *, fragment=4, envs=2, batch_mode="truncate_episodes", lengths=(3, 2), hooks=None
):
    raw = small_config(
        tmp_path,
        env={"name": SCRIPTED, "kwargs": {"lengths": list(lengths), "terminated": [True, False]}},
        workers={"num_envs_per_worker": envs, "rollout_fragment_length": fragment, "batch_mode": batch_mode},
    )
    config = config_mod.resolve(raw)
    return RolloutWorker(
        config,
        PPO.policy_class("torch"),
        registry.load_env_adapter("gymnasium"),
        worker_index=0,
        hooks=hooks,
    )


def test_bootstrap_row_of_a_fragment_is_the_first_row_of_the_next(tmp_path):
    evaluator = make_evaluator(tmp_path)
    try:
        previous = evaluator._sample_fragment()
        assert previous[SampleBatch.OBS].shape[:2] == (5, 2)  # [T+1, B]
        for _ in range(5):
            fragment = evaluator._sample_fragment()
            for key in (SampleBatch.OBS, SampleBatch.STEP_TYPES, SampleBatch.REWARDS, "eps_id", "t"):
                np.testing.assert_array_equal(previous[key][-1], fragment[key][0])
            previous = fragment
    finally:
        evaluator.stop()


@pytest.mark.parametrize("fragment", [1, 3, 4, 7])
def test_no_transition_is_lost_or_duplicated_between_consecutive_batches(tmp_path, fragment):
    evaluator = make_evaluator(tmp_path, fragment=fragment)
    try:
        rows = [evaluator.sample() for _ in range(12)]
    finally:
        evaluator.stop()
    batch = SampleBatch.concat(rows)
    # obs = [episode index within its env, step index]; eps_id is unique across envs
    seen = Counter((int(e), int(o[1])) for e, o in zip(batch["eps_id"], batch[SampleBatch.OBS], strict=True))
    assert max(seen.values()) == 1, "a transition was trained on twice"
    by_episode: dict[int, list[int]] = {}
    for eps, t in seen:
        by_episode.setdefault(eps, []).append(t)
    for eps, steps in by_episode.items():
        # every episode starts at step 0 and has no holes (the newest one may still be running)
        assert sorted(steps) == list(range(len(steps))), f"episode {eps} lost a step: {sorted(steps)}"
    lengths = {3, 2}
    finished = [len(s) for s in by_episode.values()]
    assert set(finished[:-4]) <= lengths  # whole episodes: 3 (terminated) or 2 (truncated) actions each


def test_last_rows_and_bootstrap_rows_are_not_trained_on(tmp_path):
    """A sampled batch holds exactly the fragment's body rows that are not LAST: not its bootstrap row."""
    evaluator = make_evaluator(tmp_path)
    fragments = []
    sample_fragment = evaluator._sample_fragment

    def recording():
        fragments.append(sample_fragment())
        return fragments[-1]

    evaluator._sample_fragment = recording
    try:
        batches = [evaluator.sample() for _ in range(3)]
    finally:
        evaluator.stop()
    for fragment, batch in zip(fragments, batches, strict=True):
        steps = fragment[SampleBatch.STEP_TYPES]
        body = [
            (int(fragment["eps_id"][t, b]), int(fragment["t"][t, b]))
            for t in range(steps.shape[0] - 1)
            for b in range(steps.shape[1])
            if steps[t, b] != StepType.LAST
        ]
        rows = [(int(e), int(t)) for e, t in zip(batch["eps_id"], batch["t"], strict=True)]
        assert sorted(rows) == sorted(body)
        bootstrap = {(int(e), int(t)) for e, t in zip(fragment["eps_id"][-1], fragment["t"][-1], strict=True)}
        assert not bootstrap & set(rows)
        assert (batch[SampleBatch.STEP_TYPES] != StepType.LAST).all()


def test_complete_episodes_batches_hold_only_whole_episodes(tmp_path):
    evaluator = make_evaluator(tmp_path, batch_mode="complete_episodes", fragment=5, lengths=(4, 3))
    try:
        for _ in range(4):
            batch = evaluator.sample()
            assert len(batch) >= 5 * 2
            episodes: dict[int, list[int]] = {}
            for eps, t in zip(batch["eps_id"], batch["t"], strict=True):
                episodes.setdefault(int(eps), []).append(int(t))
            for steps in episodes.values():
                assert sorted(steps) in ([0, 1, 2, 3], [0, 1, 2])
    finally:
        evaluator.stop()


def test_episode_metrics_count_truncated_episodes(tmp_path):
    evaluator = make_evaluator(tmp_path, lengths=(3, 2))
    try:
        for _ in range(5):
            evaluator.sample()
        metrics = evaluator.pop_metrics()
        current = evaluator._timestep.step_type
        running_steps = int(evaluator._episode_length[current != StepType.LAST].sum())
    finally:
        evaluator.stop()
    episodes = metrics["episodes"]
    assert any(e["truncated"] for e in episodes) and any(e["terminated"] for e in episodes)
    for e in episodes:
        assert e["length"] == (3 if e["terminated"] else 2)
        assert e["episode_return"] == e["length"]  # reward 1 per step, none at FIRST
    # env steps are transitions: the reset steps of next-step autoreset are not counted
    assert metrics["env_steps"] == sum(e["length"] for e in episodes) + running_steps
    assert metrics["env_steps"] < 5 * 4 * 2


class EpisodeCounter:
    """A hook recording a custom metric and checking the other hooks are called."""

    def __init__(self):
        self.calls = Counter()

    @rlgear.hookimpl
    def on_episode_end(self, episode):
        self.calls["on_episode_end"] += 1
        episode.custom_metrics["double_length"] = 2 * episode.length

    @rlgear.hookimpl
    def on_train_result(self, trainer, result):
        self.calls["on_train_result"] += 1
        result["custom_metrics/iteration_seen"] = trainer.iteration

    @rlgear.hookimpl
    def on_checkpoint(self, checkpoint_dir):
        self.calls["on_checkpoint"] += 1
        self.checkpoint_dir = checkpoint_dir


def test_custom_metric_from_a_hook_shows_up_under_custom_metrics(tmp_path):
    hook = EpisodeCounter()
    raw = small_config(tmp_path, stop={"training_iteration": 3}, checkpoint={"every": 0, "at_end": True})
    result = rlgear.train(raw, hooks=[hook])
    assert result["custom_metrics/double_length_mean"] == pytest.approx(2 * result["episode_len_mean"])
    low, high = result["custom_metrics/double_length_min"], result["custom_metrics/double_length_max"]
    assert low <= result["custom_metrics/double_length_mean"] <= high and low % 2 == 0 and high % 2 == 0
    assert result["custom_metrics/iteration_seen"] == 3
    assert hook.calls["on_train_result"] == 3
    assert hook.calls["on_episode_end"] > 0
    assert hook.calls["on_checkpoint"] == 1 and "checkpoint_000003" in hook.checkpoint_dir


class UnevenEnv(gym.Env):
    """Every episode of an even-numbered instance lasts 20 steps, of an odd-numbered one 1 step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    instances = itertools.count()

    def __init__(self):
        self.length = 20 if next(self.instances) % 2 == 0 else 1
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 1.0, False, self.t >= self.length, {}


def test_evaluate_takes_a_fixed_share_of_episodes_from_each_env_not_the_first_to_end(tmp_path):
    """With one env that ends episodes at once and one that takes 20 steps, the first 4 episodes to
    end would all be the short env's; evaluation scores 2 of each (SB3's evaluate_policy does the same)."""
    raw = small_config(
        tmp_path, env={"name": "tests.test_evaluator:UnevenEnv", "vectorization": "sync"},
        workers={"num_envs_per_worker": 2},
    )  # fmt: skip
    worker = RolloutWorker(
        config_mod.resolve(raw), PPO.policy_class("torch"), registry.load_env_adapter("gymnasium")
    )
    try:
        episodes = worker.evaluate(4)
    finally:
        worker.stop()
    assert Counter(e["env_id"] for e in episodes) == {0: 2, 1: 2}
    assert sorted(e["length"] for e in episodes) == [1, 1, 20, 20]
