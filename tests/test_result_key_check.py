"""Stop keys and tune.metric under custom_metrics/ are checked at the first result that has such keys (issue 18).

A custom_metrics/ key is also judged when no result has any custom metric (no hook records one):
at the third result of the run (or trial) once an episode has ended (ResultKeyCheck's docstring).
"""

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


def test_a_custom_metric_stop_key_no_hook_reports_stops_the_run_at_the_third_result(tmp_path):
    raw = small_config(tmp_path, stop={"custom_metrics/goal_reached_mean": 1.0, "training_iteration": 200})
    with pytest.raises(ConfigError) as caught:
        run(config_mod.resolve(raw))  # no hook: no result ever has a custom_metrics/ key
    message = str(caught.value)
    assert (
        "stop.custom_metrics/goal_reached_mean: the results have no key 'custom_metrics/goal_reached_mean'"
        in (message)
    )
    assert "the custom_metrics/* keys of this run: none, after 3 results" in message
    assert "is the hook that records it passed (hooks=[...]) or installed" in message
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert len((run_dir / "progress.jsonl").read_text().splitlines()) == 3  # not 200 iterations


def test_a_tune_metric_under_custom_metrics_no_hook_reports_stops_the_experiment(tmp_path):
    config = small_config(tmp_path, stop={"training_iteration": 50})
    config["tune"] = {"metric": "custom_metrics/goal_reached_mean", "mode": "max"}
    with pytest.raises(
        ConfigError,
        match=r"tune\.metric: the results have no key 'custom_metrics/goal_reached_mean' "
        r"\(the custom_metrics/\* keys of this run: none, after 3 results",
    ):
        tune_run(config, progress="none")


def test_a_run_without_custom_metrics_is_judged_only_after_three_results_with_an_episode():
    check = config_mod.ResultKeyCheck({"custom_metrics/x_mean": "stop.custom_metrics/x_mean"})
    for iteration in range(1, 6):  # no episode has ended: the hooks' on_episode_end never ran
        check.check({"training_iteration": iteration, "episodes_this_iter": 0})
    assert check.pending
    check = config_mod.ResultKeyCheck({"custom_metrics/x_mean": "stop.custom_metrics/x_mean"})
    check.check({"training_iteration": 1, "episodes_this_iter": 4})
    check.check({"training_iteration": 2, "episodes_this_iter": 4})
    assert check.pending  # two results: not judged yet
    with pytest.raises(ConfigError, match=r"none, after 3 results and 12 finished episodes"):
        check.check({"training_iteration": 3, "episodes_this_iter": 4})
    assert not check.pending


def test_each_trial_gets_its_own_three_results():
    check = config_mod.ResultKeyCheck({"custom_metrics/x_mean": "tune.metric"})
    for iteration in (1, 2):  # four results of the experiment, two of each trial
        for trial in ("t0", "t1"):
            check.check({"trial_id": trial, "training_iteration": iteration, "episodes_this_iter": 2})
    assert check.pending
    check.check({"trial_id": "t2", "training_iteration": 1, "episodes_this_iter": 2})  # a new trial's first
    assert check.pending
    with pytest.raises(ConfigError, match=r"tune\.metric: the results have no key 'custom_metrics/x_mean'"):
        check.check({"trial_id": "t0", "training_iteration": 3, "episodes_this_iter": 2})


def test_a_custom_metric_that_appears_within_the_grace_results_is_judged_by_the_keys_it_has():
    check = config_mod.ResultKeyCheck({"custom_metrics/x_mean": "stop.custom_metrics/x_mean"})
    check.check({"training_iteration": 1, "episodes_this_iter": 3})
    check.check({"training_iteration": 2, "episodes_this_iter": 3})
    check.check({"training_iteration": 3, "episodes_this_iter": 3, "custom_metrics/x_mean": 0.5})
    assert not check.pending  # found at the third result: no error
