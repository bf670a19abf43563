"""`rlgear train / evaluate` as a user runs them: run folder, resume, Ctrl-C."""

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

from rlgear.run import checkpoint as ckpt
from tests.conftest import small_config

ENV = {**os.environ, "RLGEAR_DISABLE_PLUGIN_AUTOLOAD": "1"}


def write_config(tmp_path, **sections) -> Path:
    raw = small_config(tmp_path, **sections)
    raw["logging"]["tensorboard"] = True
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def rlgear(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "rlgear", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


def only_run_dir(tmp_path) -> Path:
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


def progress(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_train_writes_config_results_tensorboard_and_checkpoints_then_resume_continues(tmp_path):
    config = write_config(tmp_path, stop={"training_iteration": 3}, checkpoint={"every": 2, "keep": 5})
    done = rlgear("train", config, "--progress", "plain")
    assert done.returncode == 0, done.stderr
    run_dir = only_run_dir(tmp_path)
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["training"]["sgd_minibatch_size"] == 32 and saved["seed"] == 0
    assert saved["training"]["clip_param"] == 0.2  # defaults are filled in
    results = progress(run_dir)
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    for key in ("timesteps_total", "episode_return_mean", "env_steps_per_s", "learner/policy_loss"):
        assert key in results[-1]
    assert list(run_dir.glob("events.out.tfevents.*"))
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["checkpoint_000002", "checkpoint_000003"]
    assert "iter    3" in done.stdout and "checkpoint_000003" in done.stdout

    resumed = rlgear("train", config, "--resume", run_dir, "--set", "stop={training_iteration: 5}")
    assert resumed.returncode == 0, resumed.stderr
    results = progress(run_dir)
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 4, 5]
    assert results[3]["timesteps_total"] > results[2]["timesteps_total"]
    assert results[3]["episodes_total"] > results[2]["episodes_total"]

    evaluated = rlgear("evaluate", run_dir, "--episodes", "3")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "episodes 3 | return mean" in evaluated.stdout and "checkpoint_000005" in evaluated.stdout


def test_resume_refuses_a_config_that_changes_what_was_trained(tmp_path):
    config = write_config(tmp_path, stop={"training_iteration": 1})
    assert rlgear("train", config).returncode == 0
    run_dir = only_run_dir(tmp_path)
    refused = rlgear("train", config, "--resume", run_dir, "--set", "training.lr=0.1")
    assert refused.returncode == 2
    assert "'training' differs from the run's" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert len(progress(run_dir)) == 1


@pytest.mark.slow
def test_ctrl_c_writes_a_checkpoint_and_exits_zero(tmp_path):
    config = write_config(tmp_path, stop={"timesteps_total": 10_000_000}, checkpoint={"every": 0})
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlgear", "train", str(config), "--progress", "plain"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until training has produced results
        runs = list((tmp_path / "runs").glob("*/progress.jsonl"))
        if runs and len(runs[0].read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "interrupted" in stdout and "Traceback" not in stderr
    run_dir = only_run_dir(tmp_path)
    newest = ckpt.latest(run_dir)
    assert newest is not None
    last = progress(run_dir)[-1]
    assert newest.name == ckpt.checkpoint_name(last["training_iteration"])
    _, state, _, _ = ckpt.read(newest)
    assert state["counters"]["timesteps_total"] == last["timesteps_total"]
