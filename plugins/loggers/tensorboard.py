"""TensorBoard event files in the run folder (tensorboardX), x axis ``timesteps_total``.

Every finite number of a result becomes the scalar ``rlgear/<key>``; an
evaluation clip (``evaluation/video``, from ``training.evaluation_video_every``)
becomes a TensorBoard video. The config is not logged here (it is the run
folder's ``config.yaml``).

On a resume, the iterations logged after the restored checkpoint run again, so
their old points must go. A restart marker (tensorboardX's ``purge_step``) is
not enough: TensorBoard ignores the first ``SessionLog.START`` of a run, and its
fast loader honours none. So the event files are rewritten instead: the points
up to the checkpoint's ``timesteps_total`` are copied into the new file, and the
old files are renamed aside (``events.out.discarded.*``: TensorBoard reads only
names holding ``tfevents``; rename one back to see it), as ``progress.jsonl``
moves its rows to ``progress.discarded.jsonl``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rlgear.run.logger import Logger, ResumePoint, numeric_items

#: what TensorBoard looks for in a file name to read it as an event file
EVENTS_MARK = "tfevents"
#: what replaces it in the name of an event file moved aside on resume
DISCARDED_MARK = "discarded"


class TensorBoardLogger(Logger):
    description = "TensorBoard scalars (tensorboardX), x axis timesteps_total"

    def __init__(self, flush_secs: int = 10) -> None:
        self.flush_secs = flush_secs
        self._writer = None
        self.run_dir: Path | None = None

    def open(self, run_dir: Path, config: Mapping[str, Any], resume: ResumePoint | None) -> None:
        from tensorboardX import SummaryWriter  # imported only when used

        self.run_dir = run_dir
        earlier = event_files(run_dir) if resume is not None else []
        suffix = "" if resume is None else unused_suffix(run_dir, f".resume{resume.iteration}")
        self._writer = SummaryWriter(logdir=str(run_dir), flush_secs=self.flush_secs, filename_suffix=suffix)
        if earlier:
            self._copy_kept_points(earlier, resume.timesteps_total)
            for path in earlier:  # only once the kept points are safe in the new file
                move_aside(path)

    def _copy_kept_points(self, paths: list[Path], last_step: int) -> None:
        """Write the points of ``paths`` up to ``last_step`` (with their wall times) into the new file."""
        file_writer = self._writer.file_writer
        for path in paths:
            for event in read_events(path):
                if event.HasField("summary") and event.step <= last_step:
                    file_writer.add_event(event, walltime=event.wall_time)
        file_writer.flush()

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


def event_files(run_dir: Path) -> list[Path]:
    """The files of ``run_dir`` that TensorBoard reads as event files, in the order it reads them."""
    return sorted(path for path in run_dir.iterdir() if EVENTS_MARK in path.name and path.is_file())


def unused_suffix(run_dir: Path, base: str) -> str:
    """A file-name suffix no file of ``run_dir`` ends with.

    tensorboardX names a file by the second it opened it and truncates one of
    the same name, so a resume within the second of an earlier start would
    otherwise write over the file whose points it is about to copy.
    """
    names = [path.name for path in run_dir.iterdir()]
    suffix, number = base, 0
    while any(name.endswith(suffix) for name in names):
        number += 1
        suffix = f"{base}.{number}"
    return suffix


def read_events(path: Path) -> Iterator[Any]:
    """The ``Event`` records of one event file (TFRecord framing), up to a record torn by a kill."""
    from tensorboardX.proto.event_pb2 import Event

    data = path.read_bytes()
    offset = 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        start = offset + 12  # the length and its CRC
        if start + length + 4 > len(data):  # the record and its CRC
            return
        yield Event.FromString(data[start : start + length])
        offset = start + length + 4


def move_aside(path: Path) -> Path:
    """Rename an event file so that TensorBoard no longer reads it (never over another file)."""
    target = path.with_name(path.name.replace(EVENTS_MARK, DISCARDED_MARK))
    number = 1
    while target.exists():
        target = path.with_name(f"{path.name.replace(EVENTS_MARK, DISCARDED_MARK)}.{number}")
        number += 1
    path.rename(target)
    return target
