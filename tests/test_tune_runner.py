"""The trial runner: state file, retries, resume (after SIGKILL too), refusals, the table and plots."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import rlgear
from rlgear.errors import ConfigError
from rlgear.scheduler import TrialScheduler, TrialStatus
from rlgear.tune import experiment_state as es
from rlgear.tune.experiment import run
from tests.conftest import needs_matplotlib, small_config


def experiment_config(tmp_path, iterations=4, **tune):
    config = small_config(tmp_path, training={"lr": {"grid_search": [1e-3, 3e-4]}})
    config["stop"] = {"training_iteration": iterations}
    config["tune"] = {"checkpoint_freq": 2, **tune}
    return config


def progress(trial_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (trial_dir / "progress.jsonl").read_text().splitlines()]


def test_every_trial_runs_to_its_stop_and_the_state_file_says_so(tmp_path):
    result = run(experiment_config(tmp_path), progress="none")
    assert [t.status for t in result.trials] == [TrialStatus.TERMINATED] * 2
    state = es.read_state(result.experiment_dir)
    assert [t["status"] for t in state["trials"]] == ["TERMINATED", "TERMINATED"]
    assert state["runner"]["iterations"] == 8
    for trial in result.trials:
        rows = progress(Path(trial.logdir))
        assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4]
        assert Path(trial.checkpoint).name == "checkpoint_000004"
    assert result.best_trial in result.trials
    assert result.best_checkpoint == result.best_trial.checkpoint
    assert (result.experiment_dir / es.CONFIG_FILE).exists()


def test_max_concurrent_keeps_later_trials_pending_until_a_slot_frees(tmp_path):
    config = experiment_config(tmp_path, max_concurrent=1)
    result = run(config, progress="none")
    first, second = (progress(Path(t.logdir)) for t in result.trials)
    assert first[-1]["timestamp"] <= second[0]["timestamp"]


class FailOnce:
    """Raises at one iteration of the trainer whose lr is ``lr``, ``times`` times in all."""

    def __init__(self, lr, iteration, times=1):
        self.lr, self.iteration, self.left = lr, iteration, times

    @rlgear.hookimpl
    def on_train_result(self, trainer, result):
        if (
            trainer.config.training.lr == self.lr
            and result["training_iteration"] == self.iteration
            and self.left
        ):
            self.left -= 1
            raise RuntimeError("simulated failure")


def test_a_trial_that_raises_is_retried_from_its_last_checkpoint(tmp_path):
    hook = FailOnce(1e-3, iteration=3)
    result = run(experiment_config(tmp_path, max_failures=1), hooks=[hook], progress="none")
    failed = result.trials[0]
    assert failed.status == TrialStatus.TERMINATED and failed.num_failures == 1
    rows = progress(Path(failed.logdir))
    # restored from checkpoint_000002: iteration 3 is redone, nothing restarts from 1
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4]
    retries = [e for e in result.events if e["event"] == "retry"]
    assert len(retries) == 1 and "simulated failure" in retries[0]["error"]


def test_a_trial_failing_more_than_max_failures_is_marked_error_and_the_rest_finish(tmp_path):
    hook = FailOnce(1e-3, iteration=3, times=10)
    result = run(experiment_config(tmp_path, max_failures=2), hooks=[hook], progress="none")
    failed, other = result.trials
    assert failed.status == TrialStatus.ERROR
    assert failed.num_failures == 3
    assert "simulated failure" in failed.error
    assert other.status == TrialStatus.TERMINATED
    assert es.read_state(result.experiment_dir)["trials"][0]["status"] == "ERROR"


def test_resume_refuses_a_changed_config_and_names_the_key(tmp_path):
    config = experiment_config(tmp_path, iterations=1)
    result = run(config, progress="none")
    changed = experiment_config(tmp_path, iterations=1)
    changed["training"]["lr"] = {"grid_search": [1e-3, 1e-4]}
    with pytest.raises(ConfigError) as info:
        run(changed, resume=result.experiment_dir, progress="none")
    message = str(info.value)
    assert "no longer matches" in message and "training.lr" in message
    assert str(result.experiment_dir / es.CONFIG_FILE) in message
    # display settings may change
    shown = experiment_config(tmp_path, iterations=1)
    shown["logging"]["progress"] = "plain"
    run(shown, resume=result.experiment_dir, progress="none")


def test_resume_of_a_folder_without_experiments_says_so(tmp_path):
    with pytest.raises(rlgear.RLGearError, match=r"neither an experiment folder nor a folder holding one"):
        run(experiment_config(tmp_path), resume=tmp_path, progress="none")


def test_train_refuses_a_tune_section_and_points_to_rlgear_tune(tmp_path):
    with pytest.raises(ConfigError, match=r"tune: .*rlgear tune CONFIG"):
        rlgear.train(experiment_config(tmp_path))


class Iterations:
    """Records the first iteration each trainer reports (a restored trainer continues its count)."""

    def __init__(self):
        self.first = {}

    @rlgear.hookimpl
    def on_train_result(self, trainer, result):
        self.first.setdefault(trainer.config.training.lr, result["training_iteration"])


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_continues_every_trial(tmp_path):
    config = experiment_config(tmp_path, iterations=30)
    config["training"]["lr"] = {"grid_search": [1e-3, 3e-4, 1e-4]}
    config["tune"]["checkpoint_freq"] = 3
    config["tune"]["name"] = "killed"
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    experiment = tmp_path / "runs" / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlgear", "tune", str(path), "--progress", "none"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait until every trial has a checkpoint past iteration 3
            time.sleep(0.2)
            try:
                state = json.loads((experiment / es.STATE_FILE).read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                continue
            its = [t["last_result"].get("training_iteration", 0) for t in state["trials"]]
            if all(t["checkpoint"] for t in state["trials"]) and min(its) >= 7:
                break
        assert proc.poll() is None, proc.stderr.read().decode()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_state = es.read_state(experiment)
    assert all(t["status"] == "RUNNING" for t in killed_state["trials"])
    checkpointed = {
        t["trial_id"]: int(Path(t["checkpoint"]).name.split("_")[1]) for t in killed_state["trials"]
    }
    assert min(checkpointed.values()) >= 3

    seen = Iterations()
    result = run(
        path, resume=tmp_path / "runs", hooks=[seen], progress="none"
    )  # the parent: newest experiment
    assert result.experiment_dir == experiment
    for trial in result.trials:
        assert trial.status == TrialStatus.TERMINATED
        assert trial.last_result["training_iteration"] == 30
        rows = progress(Path(trial.logdir))
        assert [r["training_iteration"] for r in rows] == list(range(1, 31))  # redone results replaced
        assert seen.first[trial.config["training"]["lr"]] == checkpointed[trial.trial_id] + 1


@needs_matplotlib
def test_plot_draws_one_line_per_trial(tmp_path):
    from rlgear.tune.plot import plot

    result = run(experiment_config(tmp_path, iterations=6), progress="none")
    summary = plot(result.experiment_dir)
    assert summary.lines == 2 and summary.exploit_marks == 0
    data = summary.path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@needs_matplotlib
def test_plot_cli_writes_the_png(tmp_path, capsys):
    from rlgear.cli import main

    result = run(experiment_config(tmp_path, iterations=6), progress="none")
    out = tmp_path / "curves.png"
    assert main(["plot", str(result.experiment_dir), "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "2 lines" in capsys.readouterr().out


def test_plot_without_matplotlib_names_the_extra_to_install(tmp_path, monkeypatch):
    """Runs with or without matplotlib: an import that fails is what a user without the extra sees."""
    from rlgear.tune.plot import plot

    result = run(experiment_config(tmp_path, iterations=2), progress="none")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    with pytest.raises(rlgear.PluginError, match=r"needs matplotlib.*pip install 'rlgear\[plot\]'"):
        plot(result.experiment_dir)
    assert not list(result.experiment_dir.glob("*.png"))  # nothing half-written


def test_the_plain_table_shows_status_and_searched_values(tmp_path, capsys):
    config = experiment_config(tmp_path, iterations=2)
    config["logging"]["progress_interval_s"] = 0  # a table after every iteration
    run(config, progress="plain")
    out = capsys.readouterr().out
    assert out.count("2 trials: 2 TERMINATED") == 1  # the final table is not printed twice
    assert "training.lr" in out and "0.0003" in out
    assert "best trial: trial_000" in out or "best trial: trial_001" in out


def test_a_metric_no_result_has_is_reported_instead_of_a_best_trial(tmp_path, capsys):
    result = run(
        experiment_config(tmp_path, iterations=1, metric="custom_metrics/nope_mean"), progress="plain"
    )
    assert result.best_trial is None
    out = capsys.readouterr().out
    assert "no best trial: no trial's last result has tune.metric 'custom_metrics/nope_mean'" in out
    assert "episode_return_mean" in out  # what the results do have


@pytest.mark.parametrize("name", ["ppo-cartpole-pbt.yaml", "ppo-cartpole-asha.yaml"])
def test_the_shipped_tune_configs_are_valid(name):
    from rlgear import config as config_mod
    from rlgear.tune.config import build_tune, make_scheduler, split_tune_section
    from rlgear.tune.experiment import _Fail, make_trials

    path = Path(__file__).resolve().parent.parent / "configs" / "tune" / name
    base, tune_raw = split_tune_section(config_mod.read_yaml(path))
    fail = _Fail(str(path), {})
    tune = build_tune(tune_raw, fail)
    assert make_scheduler(tune, fail).metric == "episode_return_mean"
    assert len(make_trials(base, tune, fail)) >= 4


class PauseOnce(TrialScheduler):
    """Pauses the first trial at iteration 2; the runner must restart it from its checkpoint."""

    def __init__(self):
        super().__init__("episode_return_mean", "max")
        self.paused = False
        self.seen_paused = False

    def on_trial_result(self, runner, trial, result):
        self.seen_paused |= any(t.status == TrialStatus.PAUSED for t in runner.get_trials())
        if trial.trial_id == "trial_000" and result["training_iteration"] == 2 and not self.paused:
            self.paused = True
            return self.PAUSE
        return self.CONTINUE


def test_a_paused_trial_releases_its_trainer_and_continues_from_its_checkpoint(tmp_path):
    from rlgear.tune.config import TuneConfig
    from rlgear.tune.executor import LocalExecutor
    from rlgear.tune.experiment import _Fail, make_trials
    from rlgear.tune.runner import TrialRunner

    config = experiment_config(tmp_path)
    base = {k: v for k, v in config.items() if k != "tune"}
    tune = TuneConfig(checkpoint_freq=100, max_concurrent=1)
    trials = make_trials(base, tune, _Fail("test.yaml", {}))
    scheduler, executor = PauseOnce(), LocalExecutor(max_concurrent=1)
    runner = TrialRunner(tmp_path / "exp", tune, scheduler, executor, trials)
    (tmp_path / "exp").mkdir()
    runner.run()
    assert scheduler.seen_paused
    assert all(t.status == TrialStatus.TERMINATED for t in trials)
    rows = progress(Path(trials[0].logdir))
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4]  # restored at 2, not restarted
    # while trial_000 was paused, trial_001 got the only slot
    other = progress(Path(trials[1].logdir))
    assert other[0]["timestamp"] < rows[2]["timestamp"]


def test_resume_needs_only_the_experiment_folder_not_the_original_logging_dir(tmp_path, monkeypatch):
    """`rlgear tune CONFIG --set logging.dir=X`, then `rlgear tune CONFIG --resume X/<experiment>`."""
    config = experiment_config(tmp_path, iterations=2)
    del config["logging"]["dir"]
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    first = run(path, overrides=[f"logging.dir={tmp_path / 'elsewhere'}"], progress="none")
    assert first.experiment_dir.parent == tmp_path / "elsewhere"
    monkeypatch.chdir(tmp_path)
    again = run(path, resume=first.experiment_dir, progress="none")
    assert again.experiment_dir == first.experiment_dir
    assert [t.logdir for t in again.trials] == [t.logdir for t in first.trials]
    assert not (tmp_path / "runs").exists()  # nothing written where the config's default points
    with pytest.raises(ConfigError, match=r"training\.lr"):  # what it trains still may not change
        run(path, overrides=["training.lr=0.1"], resume=first.experiment_dir, progress="none")
