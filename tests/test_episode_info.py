"""``episode.last_info``: the channel from an env's ``info`` to ``on_episode_end`` hooks."""

from __future__ import annotations

import numpy as np
import pytest

import rlgear
from rlgear.sampling.metrics import env_info_row
from tests.conftest import small_config


def test_env_info_row_takes_one_envs_entries_and_honours_the_masks():
    info = {
        "is_success": np.array([True, False, False]),
        "_is_success": np.array([True, True, False]),
        "bonus": np.array([7, 0, 0]),
        "_bonus": np.array([True, False, False]),
        "episode": {"r": np.array([1.5, 2.5, 0.0]), "_r": np.array([True, True, False])},
    }
    assert env_info_row(info, 0) == {"is_success": True, "bonus": 7, "episode": {"r": 1.5}}
    assert env_info_row(info, 1) == {"is_success": False, "episode": {"r": 2.5}}
    assert env_info_row(info, 2) == {"episode": {}}
    assert type(env_info_row(info, 0)["bonus"]) is int  # numpy scalars become Python ones
    assert env_info_row(None, 0) == {} and env_info_row({}, 0) == {}


class LastInfoRecorder:
    def __init__(self):
        self.episodes = []

    @rlgear.hookimpl
    def on_episode_end(self, episode):
        self.episodes.append((episode.terminated, episode.length, dict(episode.last_info)))
        if episode.last_info.get("is_success"):
            episode.custom_metrics["success"] = 1.0
        else:
            episode.custom_metrics["success"] = 0.0


def test_a_hook_sees_the_env_info_of_each_episodes_final_step(tmp_path):
    hook = LastInfoRecorder()
    raw = small_config(
        tmp_path,
        env={"name": "tests.goal_env:GoalEnv", "kwargs": {"max_steps": 2}},
        workers={"num_envs_per_worker": 3},
        # ~60 episodes of an untrained policy, each truncated with probability p(wait)^2 (about 1/4):
        # both kinds are near certain whatever the seed's random stream
        training={"train_batch_size": 128, "sgd_minibatch_size": 32, "num_sgd_iter": 1},
        stop={"training_iteration": 1},
        checkpoint={"every": 0, "at_end": False},
    )
    result = rlgear.train(raw, hooks=[hook])
    terminated = [info for done, _, info in hook.episodes if done]
    truncated = [info for done, _, info in hook.episodes if not done]
    assert terminated and truncated  # a random policy does both
    assert all(info == {"is_success": True, "bonus": 7} for info in terminated), terminated[:3]
    assert all(info == {"is_success": False} for info in truncated), truncated[:3]
    assert all(length == 2 for done, length, _ in hook.episodes if not done)
    # the facts reach the results through custom_metrics
    assert 0.0 < result["custom_metrics/success_mean"] < 1.0


class NeedsArguments:
    def __init__(self, threshold):
        self.threshold = threshold

    @rlgear.hookimpl
    def on_episode_end(self, episode):
        pass


def test_a_hook_plugin_given_as_a_class_is_used_as_an_instance(tmp_path):
    LastInfoRecorder.seen = []

    class ClassHook:
        @rlgear.hookimpl
        def on_episode_end(self, episode):
            LastInfoRecorder.seen.append(episode.length)

    raw = small_config(tmp_path, stop={"training_iteration": 4}, checkpoint={"every": 0, "at_end": False})
    result = rlgear.train(
        raw, hooks=[ClassHook]
    )  # the class, not an instance: used to fail at the first call
    assert result["episodes_total"] > 0 and len(LastInfoRecorder.seen) == result["episodes_total"]


def test_a_hook_class_that_needs_arguments_is_refused_by_name():
    from rlgear.discovery.hooks import make_plugin_manager
    from rlgear.errors import PluginError

    with pytest.raises(PluginError, match="hook plugin 'NeedsArguments' is a class and could not be built"):
        make_plugin_manager([NeedsArguments], autoload=False)
