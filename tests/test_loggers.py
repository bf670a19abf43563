"""Logger plugins (logging.loggers): what each one wrote, read back with its own tool's API or files."""

from __future__ import annotations

import csv
import json
import struct
import subprocess
import sys
import time

import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.errors import ConfigError, PluginError
from rlgear.run.logger import ResumePoint, RunLoggers, logger_names
from rlgear.run.runner import run
from tests.conftest import installed, small_config

needs_mlflow = pytest.mark.skipif(
    not installed("mlflow"), reason="needs MLflow: pip install 'rlgear[mlflow]'"
)
needs_wandb = pytest.mark.skipif(not installed("wandb"), reason="needs W&B: pip install 'rlgear[wandb]'")

SECRET = "s3cr3t-logger-token"


def logged_run(tmp_path, loggers, iterations=2, resume=None, **logging):
    raw = small_config(
        tmp_path,
        stop={"training_iteration": iterations},
        checkpoint={"every": 1},
        model={"custom_options": {"api_key": SECRET}},  # a secret in the config: redacted everywhere
        logging={"name": "run", "loggers": loggers, **logging},
    )
    run(config_mod.resolve(raw), resume=resume)
    return tmp_path / "runs" / "run"


def jsonl_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]


def assert_no_secret(run_dir):
    leaks = [str(p) for p in run_dir.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaks == []


def test_tensorboard_false_removes_it_from_the_list():
    section = config_mod.LoggingConfig(tensorboard=False, loggers=["jsonl", "tensorboard", "csv"])
    assert logger_names(section) == ["jsonl", "csv"]
    assert logger_names(config_mod.LoggingConfig()) == ["jsonl", "tensorboard"]


def test_jsonl_tensorboard_and_csv_record_the_same_results(tmp_path):
    run_dir = logged_run(
        tmp_path, ["jsonl", "tensorboard", "csv"], iterations=3, tensorboard=True
    )  # evaluation from iteration 2 on: new keys mid-run
    rows = jsonl_rows(run_dir)
    assert [r["training_iteration"] for r in rows] == [1, 2, 3]
    assert list(run_dir.glob("events.out.tfevents.*"))
    with open(run_dir / "progress.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [int(r["training_iteration"]) for r in table] == [1, 2, 3]
    for row, result in zip(table, rows, strict=True):
        assert float(row["timesteps_total"]) == result["timesteps_total"]
        assert float(row["learner/total_loss"]) == pytest.approx(result["learner/total_loss"])
        mean = result["episode_return_mean"]
        assert row["episode_return_mean"] == ("" if mean is None else row["episode_return_mean"])
    assert_no_secret(run_dir)


def test_csv_widens_its_header_for_keys_that_appear_later_and_drops_rows_on_resume(tmp_path):
    from rlgear.plugins.loggers.csv_file import CsvLogger

    logger = CsvLogger()
    logger.open(tmp_path, {}, None)
    logger.log({"training_iteration": 1, "a": 1.0, "b": None})
    logger.log({"training_iteration": 2, "a": 2.0, "evaluation/x": 5.0})
    logger.log({"training_iteration": 3, "a": float("nan"), "evaluation/x": 6.0})
    logger.close()
    with open(tmp_path / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["training_iteration", "a", "b", "evaluation/x"]
    assert [r["evaluation/x"] for r in rows] == ["", "5.0", "6.0"]
    assert rows[2]["a"] == "" and rows[0]["b"] == ""
    resumed = CsvLogger()
    resumed.open(tmp_path, {}, ResumePoint(iteration=2, timesteps_total=200))
    resumed.log({"training_iteration": 3, "a": 3.5, "evaluation/x": 7.0})
    resumed.close()
    with open(tmp_path / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["training_iteration"], r["a"]) for r in rows] == [("1", "1.0"), ("2", "2.0"), ("3", "3.5")]


@needs_mlflow
@pytest.mark.slow
def test_mlflow_logs_params_metrics_and_checkpoints_in_the_run_folder_and_resumes_its_run(tmp_path):
    from mlflow.tracking import MlflowClient

    run_dir = logged_run(tmp_path, ["jsonl", "mlflow"])
    saved = json.loads((run_dir / "mlflow_run.json").read_text())
    assert saved["tracking_uri"] == f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
    client = MlflowClient(saved["tracking_uri"])
    mlrun = client.get_run(saved["run_id"])
    assert mlrun.info.status == "FINISHED"
    assert mlrun.info.run_name == "run"
    assert mlrun.data.params["training.train_batch_size"] == "64"
    assert mlrun.data.params["model.custom_options.api_key"] == config_mod.REDACTED
    rows = jsonl_rows(run_dir)
    history = client.get_metric_history(saved["run_id"], "learner/total_loss")
    assert [(m.step, m.value) for m in history] == [
        (r["timesteps_total"], pytest.approx(r["learner/total_loss"])) for r in rows
    ]
    artifacts = {a.path for a in client.list_artifacts(saved["run_id"])}
    assert {"config.yaml", "checkpoints"} <= artifacts
    checkpoints = {a.path for a in client.list_artifacts(saved["run_id"], "checkpoints")}
    assert checkpoints == {"checkpoints/checkpoint_000001", "checkpoints/checkpoint_000002"}
    assert (run_dir / "mlartifacts").is_dir()

    logged_run(tmp_path, ["jsonl", "mlflow"], iterations=3, resume=run_dir)
    assert json.loads((run_dir / "mlflow_run.json").read_text())["run_id"] == saved["run_id"]
    steps = [m.step for m in client.get_metric_history(saved["run_id"], "training_iteration")]
    assert len(steps) == 3 and steps == sorted(steps)
    assert len(client.search_runs([mlrun.info.experiment_id])) == 1
    assert_no_secret(run_dir)


def wandb_records(run_dir, timeout_s=30.0):
    """The records of an offline W&B run, once its ``exit`` record is written.

    W&B's service writes the run's ``.wandb`` file (a LevelDB-style log of protobuf
    records) on its own after ``run.finish()`` returns, so wait for the last record.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        records = _read_wandb_file(run_dir)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def _read_wandb_file(run_dir):
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    block, offset, pending, out = 32768, 7, b"", []  # the file starts with a 7-byte W&B header
    while offset + 7 <= len(data):
        left = block - offset % block
        if left < 7:  # a block's tail too short for a header is padding
            offset += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        if kind == 0 and length == 0:
            break
        pending += data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


@needs_wandb
@pytest.mark.slow
def test_wandb_offline_logs_config_results_and_checkpoints_in_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", "")
    run_dir = logged_run(tmp_path, ["jsonl", "wandb"], logger_options={"wandb": {"mode": "offline"}})
    records = wandb_records(run_dir)
    history = [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    rows = jsonl_rows(run_dir)
    assert [h["timesteps_total"] for h in history] == [r["timesteps_total"] for r in rows]
    assert [h["learner/total_loss"] for h in history] == pytest.approx(
        [r["learner/total_loss"] for r in rows]
    )
    (run_record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run_record.config.update}
    assert config["training"]["train_batch_size"] == 64
    assert config["model"]["custom_options"]["api_key"] == config_mod.REDACTED
    artifacts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert [a.type for a in artifacts] == ["checkpoint", "checkpoint"]
    assert {c.path for c in artifacts[0].manifest.contents} >= {"arrays.safetensors", "state.json"}
    assert_no_secret(run_dir)


@pytest.mark.parametrize(
    ("logging", "key", "message"),
    [
        ({"loggers": ["tensorboard", "csv"]}, "logging.loggers", "jsonl is required"),
        ({"loggers": ["jsonl", "mlfow"]}, "logging.loggers[1]", "did you mean 'mlflow'"),
        ({"loggers": ["jsonl", "csv", "csv"]}, "logging.loggers[2]", "listed twice"),
        ({"logger_options": {"mlflow": {}}}, "logging.logger_options.mlflow", "does not use"),
        (
            {"loggers": ["jsonl", "mlflow"], "logger_options": {"mlflow": {"experimnt": "x"}}},
            "logging.logger_options.mlflow.experimnt",
            "did you mean 'experiment'",
        ),
        (
            {"loggers": ["jsonl", "wandb"], "logger_options": {"wandb": {"mode": "sometimes"}}},
            "logging.logger_options.wandb",
            "expected online, offline, disabled or null",
        ),
    ],
)
def test_bad_logging_is_a_config_error_naming_the_key(tmp_path, logging, key, message):
    raw = small_config(tmp_path, logging=logging)
    with pytest.raises(ConfigError) as err:
        config = config_mod.resolve(raw, "my.yaml")
        RunLoggers.build(logger_names(config.logging), config.logging.logger_options, config.fail)
    assert str(err.value).startswith(f"my.yaml: {key}: "), str(err.value)
    assert message in str(err.value)


def test_a_missing_extra_is_named_when_the_logger_opens(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    loggers = RunLoggers.build(["mlflow"])
    with pytest.raises(PluginError, match=r"logger 'mlflow' cannot start: .*pip install 'rlgear\[mlflow\]'"):
        loggers.open(tmp_path, {})


def test_close_closes_every_logger_even_when_one_fails():
    closed = []

    class Broken(rlgear.run.logger.Logger):
        def log(self, result):
            pass

        def close(self):
            raise OSError("disk gone")

    class Fine(Broken):
        def close(self):
            closed.append(True)

    loggers = RunLoggers([Broken(), Fine()])
    with pytest.raises(OSError, match="disk gone"):
        loggers.close()
    assert closed == [True]


def test_a_run_with_the_default_loggers_imports_neither_mlflow_nor_wandb(tmp_path):
    code = (
        "import json, sys, rlgear\n"
        f"rlgear.train({small_config(tmp_path, stop={'training_iteration': 1})!r})\n"
        "print(json.dumps([m for m in ('mlflow', 'wandb') if m in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
