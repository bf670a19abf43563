"""The experiment's state file, rewritten atomically after every runner step.

``<experiment>/experiment_state.json`` holds every trial (config, status,
last result, last checkpoint and the config it was written with, failures,
recreations), the scheduler's state and the runner's counters. It is written
to a temporary file and renamed over the old one, so a process killed at any
moment (SIGKILL included) leaves either the previous or the new state, never
a torn file. ``rlgear tune --resume`` reads it back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import rlgear
from rlgear.config import redact_secrets
from rlgear.errors import CheckpointError
from rlgear.run.logger import jsonable
from rlgear.scheduler import Trial, TrialStatus

STATE_FILE = "experiment_state.json"
CONFIG_FILE = "experiment.yaml"
EVENTS_FILE = "events.jsonl"
FORMAT_VERSION = 1


def trial_to_json(trial: Trial, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return jsonable(
        {
            "trial_id": trial.trial_id,
            "config": redact_secrets(trial.config),
            "status": trial.status.value,
            "last_result": trial.last_result,
            "checkpoint": trial.checkpoint,
            "checkpoint_config": redact_secrets(trial.checkpoint_config),
            "num_failures": trial.num_failures,
            "num_recreations": trial.num_recreations,
            "num_lost_actors": trial.num_lost_actors,
            "values": trial.values,
            "logdir": trial.logdir,
            "error": trial.error,
            **(extra or {}),
        }
    )


def trial_from_json(data: dict[str, Any]) -> Trial:
    return Trial(
        config=data["config"],
        trial_id=data["trial_id"],
        status=TrialStatus(data["status"]),
        last_result=data.get("last_result") or {},
        checkpoint=data.get("checkpoint"),
        num_failures=int(data.get("num_failures", 0)),
        values=data.get("values") or {},
        logdir=data.get("logdir"),
        checkpoint_config=data.get("checkpoint_config"),
        num_recreations=int(data.get("num_recreations", 0)),
        num_lost_actors=int(data.get("num_lost_actors", 0)),
        error=data.get("error"),
    )


def dump_trial(trial: Trial, extra: dict[str, Any] | None = None) -> str:
    """One trial's JSON text (the runner caches it while the trial is unchanged)."""
    return json.dumps(trial_to_json(trial, extra), allow_nan=False)


def write_state(experiment_dir: Path, trials_json: list[str], state: dict[str, Any]) -> None:
    """Atomic replace of the state file (temp file + rename); ``trials_json`` from :func:`dump_trial`."""
    path = experiment_dir / STATE_FILE
    tmp = experiment_dir / f".{STATE_FILE}.tmp"
    payload = {"format_version": FORMAT_VERSION, "rlgear_version": rlgear.__version__, **state}
    head = json.dumps(jsonable(payload), allow_nan=False)
    tmp.write_text(f'{head[:-1]}, "trials": [{", ".join(trials_json)}]}}')
    os.replace(tmp, path)


def read_state(experiment_dir: Path) -> dict[str, Any]:
    path = experiment_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{experiment_dir}: not an experiment folder (no {STATE_FILE})") from None
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: unreadable experiment state: {err}") from err
    if data.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: experiment state format {data.get('format_version')} is not supported "
            f"by this rlgear (format {FORMAT_VERSION})"
        )
    return data


def find_experiment(path: str | os.PathLike) -> Path:
    """An experiment folder, or the newest experiment in a parent folder."""
    path = Path(path)
    if (path / STATE_FILE).exists():
        return path
    if not path.is_dir():
        raise CheckpointError(f"--resume {path}: no such experiment folder")
    candidates = [child for child in path.iterdir() if (child / STATE_FILE).exists()]
    if not candidates:
        raise CheckpointError(
            f"--resume {path}: neither an experiment folder nor a folder holding one (no {STATE_FILE})"
        )
    return max(candidates, key=lambda child: (child / STATE_FILE).stat().st_mtime)


def append_event(experiment_dir: Path, event: dict[str, Any]) -> None:
    with open(experiment_dir / EVENTS_FILE, "a") as handle:
        handle.write(json.dumps(jsonable(event)) + "\n")


def read_events(experiment_dir: Path) -> list[dict[str, Any]]:
    path = Path(experiment_dir) / EVENTS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
