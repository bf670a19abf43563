"""Evaluation videos: mp4 files of episodes, and their frames for TensorBoard.

The env adapter records (gymnasium's ``RecordVideo`` wrapper on env 0, asked for with a
:class:`rlgear.env.VideoRequest`); this module checks that the ``video`` extra is there
before anything runs, files the clips a training run records every
``training.evaluation_video_every`` evaluations under the run folder, and reads a clip
back into frames for TensorBoard. moviepy, imageio and imageio-ffmpeg (the ``video``
extra) are imported only here and only when a video is asked for.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import numpy as np

from rlgear.env import VideoRequest
from rlgear.errors import RLGearError

#: Folder of a run's evaluation clips (``training.evaluation_video_every``).
VIDEO_DIR = "videos"
#: The result key holding the clip recorded at an evaluation (a path relative to the run folder).
RESULT_KEY = "evaluation/video"
_EXTRA_MODULES = ("moviepy", "imageio", "imageio_ffmpeg")


def require_video_extra(what: str) -> None:
    """Raise an error naming ``what`` (the flag or key asking for video) when the extra is missing."""
    missing = [m for m in _EXTRA_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise RLGearError(f"{what}: recording videos needs {', '.join(missing)}: pip install 'rlgear[video]'")


class EvaluationVideo:
    """The clips of a training run: one episode every ``training.evaluation_video_every`` evaluations.

    The trainer arms :attr:`request` before an evaluation that records; :meth:`collect` then
    renames the clip to ``videos/evaluation-<iteration>.mp4`` and returns the result key that
    tells the logger to add it to TensorBoard.
    """

    def __init__(self, logdir: str | os.PathLike | None):
        require_video_extra("training.evaluation_video_every")
        self.logdir = Path(logdir) if logdir is not None else None
        folder = (self.logdir / VIDEO_DIR) if self.logdir is not None else Path.cwd() / VIDEO_DIR
        self.request = VideoRequest(folder=str(folder), name_prefix="recording")

    def collect(self, iteration: int) -> dict[str, Any]:
        """``{RESULT_KEY: path}`` of the clip the last evaluation recorded (``{}`` if none was written)."""
        if not self.request.started:
            return {}
        recorded = self.request.path(self.request.started[-1])
        if not recorded.exists():  # the episode did not end within the evaluation
            return {}
        target = recorded.with_name(f"evaluation-{iteration:06d}.mp4")
        os.replace(recorded, target)
        shown = target.relative_to(self.logdir) if self.logdir is not None else target
        return {RESULT_KEY: str(shown)}


def read_frames(path: str | os.PathLike) -> np.ndarray:
    """The frames of an mp4 as ``uint8 [T, H, W, 3]`` (imageio with its ffmpeg plugin)."""
    import imageio.v3 as iio

    return np.asarray(iio.imread(str(path), plugin="FFMPEG"))


def fps(path: str | os.PathLike) -> float:
    """The frame rate written in an mp4's metadata."""
    import imageio.v3 as iio

    return float(iio.immeta(str(path), plugin="FFMPEG").get("fps", 30.0))
