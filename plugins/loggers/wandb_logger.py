"""Weights & Biases: the config, every result, and checkpoints as artifacts.

The W&B run lives in the run folder (``wandb/``). ``mode`` null leaves the
choice to W&B (``WANDB_MODE``, else online when logged in); ``mode: offline``
(or ``WANDB_MODE=offline``) sends nothing and keeps the run in
``wandb/offline-run-*`` for a later ``wandb sync``. Results are logged with
``timesteps_total`` as the x axis of every chart. The run's id is kept in the
run folder (``wandb_run.json``), so ``--resume`` continues the same W&B run;
the iterations a resume runs again (those logged after the restored
checkpoint) are logged a second time, at the same ``timesteps_total``. The
console is not captured (rlgear's progress display stays as it is).

Needs ``pip install 'rlgear[wandb]'``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlgear.run.logger import Logger, ResumePoint, numeric_items

RUN_ID_FILE = "wandb_run.json"


class WandbLogger(Logger):
    description = (
        "Weights & Biases run: config, metrics, checkpoints as artifacts (mode: offline sends nothing)"
    )

    def __init__(
        self,
        project: str = "rlgear",
        entity: str | None = None,
        mode: str | None = None,
        run_name: str | None = None,
        log_checkpoints: bool = True,
    ) -> None:
        if mode not in (None, "online", "offline", "disabled"):
            raise ValueError(f"mode: expected online, offline, disabled or null, got {mode!r}")
        self.project = project
        self.entity = entity
        self.mode = mode
        self.run_name = run_name
        self.log_checkpoints = log_checkpoints
        self.run = None

    def open(self, run_dir: Path, config: Mapping[str, Any], resume: ResumePoint | None) -> None:
        import wandb

        saved = run_dir / RUN_ID_FILE
        run_id = None
        if resume is not None and saved.exists():
            run_id = json.loads(saved.read_text())["run_id"]
        self.run = wandb.init(
            project=self.project,
            entity=self.entity,
            mode=self.mode,
            name=self.run_name or run_dir.name,
            dir=str(run_dir),
            config=dict(config),
            id=run_id,
            resume="allow" if run_id else None,
            reinit="create_new",  # several runs in one process: rlgear tune's trials
            settings=wandb.Settings(silent=True, console="off"),
        )
        if run_id is None:
            saved.write_text(json.dumps({"run_id": self.run.id}) + "\n")
        self.run.define_metric("timesteps_total")
        self.run.define_metric("*", step_metric="timesteps_total")

    def log(self, result: Mapping[str, Any]) -> None:
        self.run.log(numeric_items(result))

    def on_checkpoint(self, path: Path) -> None:
        if not self.log_checkpoints:
            return
        import wandb

        artifact = wandb.Artifact(f"{self.run.id}-checkpoint", type="checkpoint")
        artifact.add_dir(str(path))
        self.run.log_artifact(artifact, aliases=[path.name, "latest"])

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
