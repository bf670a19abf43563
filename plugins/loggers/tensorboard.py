"""TensorBoard event files in the run folder (tensorboardX), x axis ``timesteps_total``.

Every finite number of a result becomes the scalar ``rlgear/<key>``; an
evaluation clip (``evaluation/video``, from ``training.evaluation_video_every``)
becomes a TensorBoard video. On a resume, events from the restored
checkpoint's ``timesteps_total + 1`` on that the run wrote before are hidden
(tensorboardX's ``purge_step``), so curves never double back. The config is
not logged here (it is the run folder's ``config.yaml``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlgear.run.logger import Logger, ResumePoint, numeric_items


class TensorBoardLogger(Logger):
    description = "TensorBoard scalars (tensorboardX), x axis timesteps_total"

    def __init__(self, flush_secs: int = 10) -> None:
        self.flush_secs = flush_secs
        self._writer = None
        self.run_dir: Path | None = None

    def open(self, run_dir: Path, config: Mapping[str, Any], resume: ResumePoint | None) -> None:
        from tensorboardX import SummaryWriter  # imported only when used

        self.run_dir = run_dir
        purge_step = None if resume is None else resume.timesteps_total + 1
        self._writer = SummaryWriter(logdir=str(run_dir), flush_secs=self.flush_secs, purge_step=purge_step)

    def log(self, result: Mapping[str, Any]) -> None:
        step = int(result.get("timesteps_total") or 0)
        for key, value in numeric_items(result).items():
            self._writer.add_scalar(f"rlgear/{key}", value, global_step=step)
        if result.get("evaluation/video"):  # a clip recorded by training.evaluation_video_every
            self._add_video(self.run_dir / str(result["evaluation/video"]), step)

    def _add_video(self, path: Path, step: int) -> None:
        from rlgear.run import video  # the video extra: a run only records clips when it has it

        frames = video.read_frames(path)  # [T, H, W, 3] -> tensorboardX's [N, T, C, H, W]
        clip = frames.transpose(0, 3, 1, 2)[None]
        self._writer.add_video("rlgear/evaluation/video", clip, global_step=step, fps=round(video.fps(path)))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
