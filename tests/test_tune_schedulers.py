"""ASHA and PBT: registration, options, rung decisions, explore rules, and exploit on a live trainer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlgear.discovery import registry
from rlgear.errors import ConfigError, PluginError
from rlgear.scheduler import Trial, TrialScheduler, TrialStatus
from rlgear.tune.config import TuneConfig, make_scheduler
from rlgear.tune.experiment import run
from tests.conftest import small_config


def fail(path, message):
    return ConfigError(f"test.yaml: {path}: {message}")


class Runner:
    def __init__(self, trials):
        self.trials = trials
        self.events = []

    def get_trials(self):
        return self.trials

    def log_event(self, event):
        self.events.append(event)


def test_asha_and_pbt_are_registered_schedulers():
    for name in ("asha", "pbt"):
        assert issubclass(registry.load_scheduler(name), TrialScheduler)


def test_an_unknown_scheduler_option_names_the_key():
    with pytest.raises(
        ConfigError, match=r"tune.scheduler_options.grace_periods: unknown key; did you mean 'grace_period'"
    ):
        make_scheduler(TuneConfig(scheduler="asha", scheduler_options={"grace_periods": 2}), fail)
    with pytest.raises(ConfigError, match=r"reduction_factor: expected a number above 1"):
        make_scheduler(TuneConfig(scheduler="asha", scheduler_options={"reduction_factor": 1}), fail)
    with pytest.raises(PluginError, match=r"tune.scheduler: unknown scheduler 'pbtt'.*did you mean 'pbt'"):
        make_scheduler(TuneConfig(scheduler="pbtt"), fail)


def test_asha_stops_a_trial_below_the_rung_cutoff_and_keeps_the_better():
    asha = make_scheduler(
        TuneConfig(
            scheduler="asha", scheduler_options={"grace_period": 2, "reduction_factor": 2, "max_t": 8}
        ),
        fail,
    )
    trials = [Trial(config={}, trial_id=f"t{i}") for i in range(4)]
    runner = Runner(trials)
    for trial in trials:
        asha.on_trial_add(runner, trial)
    scores = {"t0": 10.0, "t1": 1.0, "t2": 12.0, "t3": 2.0}
    decisions = {}
    for trial in trials:
        assert (
            asha.on_trial_result(runner, trial, {"training_iteration": 1, "episode_return_mean": 0})
            == "CONTINUE"
        )
    for trial in trials:
        result = {"training_iteration": 2, "episode_return_mean": scores[trial.trial_id]}
        decisions[trial.trial_id] = asha.on_trial_result(runner, trial, result)
    assert decisions == {"t0": "CONTINUE", "t1": "STOP", "t2": "CONTINUE", "t3": "STOP"}
    assert (
        asha.on_trial_result(runner, trials[0], {"training_iteration": 8, "episode_return_mean": 10})
        == "STOP"
    )


def test_a_restored_asha_makes_the_decisions_the_original_makes():
    """State saved mid-rung (through JSON, as the experiment state file keeps it) and restored into a
    new scheduler must give the same later decisions; a scheduler that forgot the rung would not."""
    options = {"grace_period": 2, "reduction_factor": 2, "max_t": 16}

    def new_scheduler():
        return make_scheduler(TuneConfig(scheduler="asha", scheduler_options=options), fail)

    asha = new_scheduler()
    trials = [Trial(config={}, trial_id=f"t{i}") for i in range(4)]
    runner = Runner(trials)
    for trial in trials:
        asha.on_trial_add(runner, trial)
    for trial_id, score in (("t0", 10.0), ("t1", 1.0), ("t2", 12.0)):
        trial = trials[int(trial_id[1])]
        asha.on_trial_result(runner, trial, {"training_iteration": 2, "episode_return_mean": score})
    asha.on_trial_result(runner, trials[0], {"training_iteration": 4, "episode_return_mean": 11.0})

    restored, forgetful = new_scheduler(), new_scheduler()
    restored.set_state(json.loads(json.dumps(asha.get_state())))
    # t3 reaches rung 2 below its cutoff; t2 reaches rung 4 below t0's recorded 11
    later = [("t3", 2, 2.0), ("t2", 4, 3.0)]

    def decisions(scheduler):
        return [
            scheduler.on_trial_result(
                runner, trials[int(tid[1])], {"training_iteration": it, "episode_return_mean": score}
            )
            for tid, it, score in later
        ]

    expected = decisions(asha)
    assert expected == ["STOP", "STOP"]
    assert decisions(restored) == expected
    assert decisions(forgetful) == ["CONTINUE", "CONTINUE"]  # so the check above tells a restore from none


def test_asha_in_min_mode_stops_the_higher_values():
    asha = make_scheduler(
        TuneConfig(scheduler="asha", mode="min", metric="loss",
                   scheduler_options={"grace_period": 1, "reduction_factor": 2, "max_t": 4}), fail,
    )  # fmt: skip
    a, b = Trial(config={}, trial_id="a"), Trial(config={}, trial_id="b")
    runner = Runner([a, b])
    assert asha.on_trial_result(runner, a, {"training_iteration": 1, "loss": 0.1}) == "CONTINUE"
    assert asha.on_trial_result(runner, b, {"training_iteration": 1, "loss": 5.0}) == "STOP"


@pytest.mark.slow
def test_asha_stops_the_worse_half_with_a_clearly_worse_learning_rate_before_max_t(tmp_path):
    config = small_config(
        tmp_path,
        training={"lr": {"grid_search": [3e-3, 1e-7, 3e-3, 1e-7]}, "train_batch_size": 256,
                  "sgd_minibatch_size": 64, "num_sgd_iter": 4, "metrics_window": 10},
        workers={"num_envs_per_worker": 4},
    )  # fmt: skip
    config["stop"] = {"training_iteration": 24}
    config["tune"] = {
        "scheduler": "asha",
        "scheduler_options": {"grace_period": 8, "reduction_factor": 2, "max_t": 24},
    }
    result = run(config, progress="none")
    by_lr = {}
    for trial in result.trials:
        by_lr.setdefault(trial.config["training"]["lr"], []).append(trial)
    for trial in by_lr[1e-7]:
        assert trial.last_result["training_iteration"] < 24, "a bad trial ran to max_t"
    for trial in by_lr[3e-3]:
        assert trial.last_result["training_iteration"] == 24
        assert trial.status == TrialStatus.TERMINATED
    for trial in by_lr[1e-7]:  # stopped at a rung (8 or 16), not by an error
        assert trial.status == TrialStatus.TERMINATED
        assert trial.last_result["training_iteration"] in (8, 16)


# --- PBT ---------------------------------------------------------------------------------


def pbt(**options):
    base = {
        "perturbation_interval": 2,
        "seed": 0,
        "hyperparam_mutations": {"training.lr": {"loguniform": [1e-5, 1e-1]}},
    }
    return make_scheduler(TuneConfig(scheduler="pbt", scheduler_options={**base, **options}), fail)


def test_pbt_explore_perturbs_by_the_factors_or_resamples_within_bounds():
    scheduler = pbt(
        hyperparam_mutations={
            "training.lr": {"loguniform": [1e-5, 1e-1]},
            "training.num_sgd_iter": [1, 2, 4, 8],
        },
        resample_probability=0.25,
    )
    config = {"training": {"lr": 1e-3, "num_sgd_iter": 4}}
    lrs, iters = [], []
    for _ in range(400):
        new = scheduler.explore(config)
        lrs.append(new["training"]["lr"])
        iters.append(new["training"]["num_sgd_iter"])
    perturbed = [lr for lr in lrs if np.isclose(lr, 8e-4) or np.isclose(lr, 1.2e-3)]
    assert (
        0.65 < len(perturbed) / len(lrs) < 0.85
    )  # resample probability 0.25 (a resample rarely lands on them)
    assert all(1e-5 <= lr <= 1e-1 for lr in lrs)
    assert set(iters) <= {1, 2, 4, 8}
    assert {2, 8} <= set(iters)  # one step down or up the list
    assert config == {"training": {"lr": 1e-3, "num_sgd_iter": 4}}  # the donor's config is not touched


def double_gamma(config):
    config["training"]["gamma"] = config["training"]["gamma"] * 0.5
    return config


def test_pbt_runs_a_custom_explore_function_after_the_builtin_one():
    scheduler = pbt(custom_explore_fn="tests.test_tune_schedulers:double_gamma")
    new = scheduler.explore({"training": {"lr": 1e-3, "gamma": 0.9}})
    assert new["training"]["gamma"] == 0.45


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"hyperparam_mutations": {"training.lr": {"grid_search": [1, 2]}}}, "grid_search can't be sampled"),
        ({"hyperparam_mutations": {"training.lr": 3}}, "expected a list of values or a distribution"),
        ({"hyperparam_mutations": {}}, "pbt needs hyperparam_mutations"),
        ({"quantile_fraction": 0.7}, "quantile_fraction: expected a number in (0, 0.5]"),
        ({"custom_explore_fn": "tests.test_tune_schedulers:nothing"}, "has no attribute 'nothing'"),
    ],
)
def test_pbt_option_errors_name_the_key(options, message):
    with pytest.raises(ConfigError) as info:
        pbt(**options)
    assert "test.yaml: tune.scheduler_options" in str(info.value)
    assert message in str(info.value)


class ExploitRunner(Runner):
    """Records the runner calls PBT makes."""

    def __init__(self, trials):
        super().__init__(trials)
        self.saved, self.exploited = [], []

    def save_trial_to_memory(self, trial, time_attr_value):
        from rlgear.tune.checkpoint_store import TrialCheckpoint

        handle = TrialCheckpoint(trial.trial_id, int(time_attr_value), time_attr_value)
        self.saved.append(handle)
        return handle

    def exploit_trial(self, trial, checkpoint, new_config):
        self.exploited.append((trial.trial_id, checkpoint, new_config))
        trial.config = new_config
        return True


def population(n):
    trials = [
        Trial(config={"seed": i, "training": {"lr": 1e-3 * (i + 1)}}, trial_id=f"t{i}") for i in range(n)
    ]
    for trial in trials:
        trial.status = TrialStatus.RUNNING
    return trials


def test_pbt_bottom_quantile_exploits_a_top_trial_from_its_latest_snapshot():
    scheduler = pbt()
    trials = population(4)
    runner = ExploitRunner(trials)
    for trial in trials:
        scheduler.on_trial_add(runner, trial)
    scores = [1.0, 50.0, 20.0, 100.0]
    for trial, score in zip(trials, scores, strict=True):
        scheduler.on_trial_result(runner, trial, {"training_iteration": 2, "episode_return_mean": score})
    # t0 reported first: nothing ranked yet, so it was snapshotted; t3 is the top donor
    assert runner.exploited == []
    # t3 reaches its next perturbation point first: a second, newer snapshot of it
    scheduler.on_trial_result(runner, trials[3], {"training_iteration": 4, "episode_return_mean": 120.0})
    t3_snapshots = [h for h in runner.saved if h.trial_id == "t3"]
    assert [h.time_attr_value for h in t3_snapshots] == [2, 4]
    scheduler.on_trial_result(runner, trials[0], {"training_iteration": 4, "episode_return_mean": 0.5})
    assert len(runner.exploited) == 1
    trial_id, snapshot, new_config = runner.exploited[0]
    assert trial_id == "t0"
    assert snapshot is t3_snapshots[-1]  # the donor's latest snapshot, not the one from iteration 2
    assert scheduler.states["t0"].progress == 4  # t0 now carries the donor's progress at that snapshot
    assert new_config["seed"] == 0  # keeps its own seed
    (event,) = [e for e in runner.events if e["event"] == "exploit"]
    assert event["old_config"] == {"training.lr": 1e-3}
    assert event["donor_config"] == {"training.lr": 4e-3}
    assert event["new_config"] == {"training.lr": new_config["training"]["lr"]}
    assert event["donor_time_attr"] == 4


def test_pbt_skips_a_donor_whose_snapshot_is_older_than_its_latest_perturbation():
    scheduler = pbt(max_checkpoint_age=2)
    trials = population(4)
    runner = ExploitRunner(trials)
    for trial, score in zip(trials, [1.0, 50.0, 20.0, 100.0], strict=True):
        scheduler.on_trial_add(runner, trial)
        scheduler.on_trial_result(runner, trial, {"training_iteration": 2, "episode_return_mean": score})
    # the top trial moves on 3 iterations past its snapshot without a new perturbation point
    scheduler.states["t3"].progress = 5
    scheduler.on_trial_result(runner, trials[0], {"training_iteration": 4, "episode_return_mean": 0.5})
    assert runner.exploited == []
    (skipped,) = [e for e in runner.events if e["event"] == "exploit_skipped"]
    assert skipped["stale_donors"] == ["t3"]
