"""Stop keys and tune.metric under custom_metrics/ are checked at the first result that has such keys (issue 18)."""

from __future__ import annotations

import pytest

from rlgear import config as config_mod
from rlgear import hookimpl
from rlgear.errors import ConfigError
from rlgear.run.runner import run
from rlgear.tune.experiment import run as tune_run
from tests.conftest import small_config


class GoalMetric:
    @hookimpl
    def on_episode_end(self, worker, episode):
        episode.custom_metrics["goal_reached"] = 1.0


def test_a_typo_in_a_custom_metric_stop_key_stops_at_once_with_did_you_mean(tmp_path):
    raw = small_config(tmp_path, stop={"custom_metrics/goal_reachd_mean": 2.0, "training_iteration": 200})
    with pytest.raises(ConfigError) as caught:
        run(config_mod.resolve(raw), hooks=[GoalMetric()])
    message = str(caught.value)
    assert "stop.custom_metrics/goal_reachd_mean: the results have no key" in message
    assert "did you mean 'custom_metrics/goal_reached_mean'" in message
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert len((run_dir / "progress.jsonl").read_text().splitlines()) < 10  # not 200 iterations


def test_a_correct_custom_metric_stop_key_stops_the_run(tmp_path):
    raw = small_config(tmp_path, stop={"custom_metrics/goal_reached_mean": 1.0, "training_iteration": 200})
    result = run(config_mod.resolve(raw), hooks=[GoalMetric()])
    assert result["custom_metrics/goal_reached_mean"] == 1.0 and result["training_iteration"] < 200


def test_a_typo_in_tune_metric_stops_the_experiment_at_the_first_result(tmp_path):
    config = small_config(tmp_path, stop={"training_iteration": 50})
    config["tune"] = {"metric": "learner/totl_loss", "mode": "min"}
    with pytest.raises(
        ConfigError,
        match=r"tune\.metric: the results have no key 'learner/totl_loss'.*did you mean 'learner/total_loss'",
    ):
        tune_run(config, progress="none")


def test_keys_not_reported_yet_are_not_judged():
    check = config_mod.ResultKeyCheck({"custom_metrics/x_mean": "stop.custom_metrics/x_mean"})
    check.check({"training_iteration": 1})  # no custom metrics yet: nothing to judge
    assert check.pending
    check.check({"custom_metrics/x_mean": 1.0})
    assert not check.pending
