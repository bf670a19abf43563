"""MLflow: the config as parameters, every result as metrics, checkpoints as artifacts.

By default the tracking store is local, inside the run folder: an SQLite
database ``mlflow.db`` and artifacts under ``mlartifacts/`` (MLflow's file
store is in maintenance mode and refuses to start unless told otherwise, so
rlgear uses the database it recommends). ``mlflow ui --backend-store-uri
sqlite:///<run folder>/mlflow.db`` shows it. ``tracking_uri`` (or
``MLFLOW_TRACKING_URI``) sends the run to a server or another store instead.

Metrics are logged with ``step = timesteps_total``; parameters are the config
flattened to dotted keys (``training.lr``), secrets already redacted; the
config is also the artifact ``config.yaml``. The MLflow run's id is kept in the
run folder (``mlflow_run.json``), so ``--resume`` continues the same MLflow run.
MLflow's metric history is append-only: the iterations a resume runs again
(those logged after the restored checkpoint) appear twice at the same steps.

Needs ``pip install 'rlgear[mlflow]'`` (mlflow-skinny, SQLAlchemy, Alembic).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlgear.run.logger import Logger, ResumePoint, numeric_items

RUN_ID_FILE = "mlflow_run.json"
#: MLflow refuses longer parameter values
_MAX_PARAM = 6000
_BATCH = 900  # MLflow takes at most 1000 metrics (and 100 params) per batch


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"training": {"lr": 0.1}}`` -> ``{"training.lr": "0.1"}`` (lists stay whole, as text)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = str(value)[:_MAX_PARAM]
    return out


class MLflowLogger(Logger):
    description = (
        "MLflow run: params, metrics, checkpoints as artifacts (local SQLite store in the run folder)"
    )

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment: str = "rlgear",
        run_name: str | None = None,
        log_checkpoints: bool = True,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.run_name = run_name
        self.log_checkpoints = log_checkpoints
        self.client = None
        self.run_id: str | None = None
        self.run_dir: Path | None = None

    def open(self, run_dir: Path, config: Mapping[str, Any], resume: ResumePoint | None) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.run_dir = run_dir
        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        artifact_location = None
        if not uri:
            uri = f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
            artifact_location = (run_dir / "mlartifacts").resolve().as_uri()
        quiet = [logging.getLogger(name) for name in ("mlflow.store.db.utils", "alembic")]
        levels = [q.level for q in quiet]
        for q in quiet:
            q.setLevel(logging.WARNING)  # "Creating initial MLflow database tables" is not the user's news
        try:
            self.client = MlflowClient(tracking_uri=uri)
            experiment = self.client.get_experiment_by_name(self.experiment)
            experiment_id = (
                experiment.experiment_id
                if experiment is not None
                else self.client.create_experiment(self.experiment, artifact_location=artifact_location)
            )
        finally:
            for q, level in zip(quiet, levels, strict=True):
                q.setLevel(level)
        saved = run_dir / RUN_ID_FILE
        existing: dict[str, str] = {}
        if resume is not None and saved.exists():
            self.run_id = json.loads(saved.read_text())["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            existing = self.client.get_run(self.run_id).data.params
        else:
            run = self.client.create_run(experiment_id, run_name=self.run_name or run_dir.name)
            self.run_id = run.info.run_id
            saved.write_text(json.dumps({"run_id": self.run_id, "tracking_uri": uri}) + "\n")
        # A resumed run may have changed stop/checkpoint/logging; MLflow refuses to change a param.
        params = [Param(k, v) for k, v in flatten(config).items() if k not in existing]
        for start in range(0, len(params), 100):
            self.client.log_batch(self.run_id, params=params[start : start + 100])
        self.client.log_dict(self.run_id, dict(config), "config.yaml")

    def log(self, result: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric

        step = int(result.get("timesteps_total") or 0)
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value in numeric_items(result).items()]
        for start in range(0, len(metrics), _BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + _BATCH])
        if result.get("evaluation/video"):  # a clip recorded by training.evaluation_video_every
            self.client.log_artifact(
                self.run_id, str(self.run_dir / str(result["evaluation/video"])), "videos"
            )

    def on_checkpoint(self, path: Path) -> None:
        if self.log_checkpoints:
            self.client.log_artifacts(self.run_id, str(path), f"checkpoints/{path.name}")

    def close(self) -> None:
        if self.client is not None and self.run_id is not None:
            self.client.set_terminated(self.run_id)
            self.client = None
