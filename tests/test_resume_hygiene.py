"""Resume leaves no residue: each iteration appears once in progress.jsonl and in TensorBoard (issue 17)."""

from __future__ import annotations

import json
import struct
import types

from rlgear import config as config_mod
from rlgear.plugins.loggers.tensorboard import TensorBoardLogger
from rlgear.run.logger import DISCARDED_FILE, ResumePoint, discard_results_after
from rlgear.run.runner import run
from tests.conftest import small_config


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def resolved(tmp_path, **sections):
    return config_mod.resolve(small_config(tmp_path, **sections))


def tensorboard_events(run_dir, paths=None):
    """Every Event in the run's TensorBoard files (TFRecord framing read by hand, no TensorBoard needed).

    The files are those TensorBoard reads: any with ``tfevents`` in its name, in name order.
    """
    from tensorboardX.proto.event_pb2 import Event

    events = []
    for path in paths if paths is not None else sorted(p for p in run_dir.iterdir() if "tfevents" in p.name):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack_from("<Q", data, offset)
            offset += 12  # length and its CRC
            events.append(Event.FromString(data[offset : offset + length]))
            offset += length + 4  # the record and its CRC
    return events


def scalar_events(run_dir, tag):
    return [e for e in tensorboard_events(run_dir) if e.HasField("summary") and e.summary.value[0].tag == tag]


def test_a_resume_after_a_kill_logs_each_iteration_once_and_keeps_the_redone_rows_aside(tmp_path):
    # A run that saved at iteration 3 and was killed after logging iteration 5 (and half of a 6th line).
    first = run(
        resolved(
            tmp_path,
            stop={"training_iteration": 5},
            checkpoint={"every": 3, "at_end": False},
            logging={"tensorboard": True},
        )
    )
    assert first["training_iteration"] == 5
    (run_dir,) = (tmp_path / "runs").iterdir()
    progress = run_dir / "progress.jsonl"
    lost = rows(progress)[3:]
    with open(progress, "a") as f:
        f.write('{"training_iteration": 6, "timesteps_to')  # torn by the kill

    resumed_config = resolved(
        tmp_path, stop={"training_iteration": 7}, checkpoint={"every": 3}, logging={"tensorboard": True}
    )
    last = run(resumed_config, resume=run_dir)

    assert last["training_iteration"] == 7
    assert [r["training_iteration"] for r in rows(progress)] == [1, 2, 3, 4, 5, 6, 7]
    timesteps = [r["timesteps_total"] for r in rows(progress)]
    assert timesteps == sorted(timesteps) and len(set(timesteps)) == 7
    aside = (run_dir / DISCARDED_FILE).read_text().splitlines()
    assert [json.loads(line) for line in aside[:2]] == lost  # nothing lost: the redone rows moved aside
    assert aside[2] == '{"training_iteration": 6, "timesteps_to'
    # TensorBoard: the event files it reads hold each kept iteration once and none of the redone ones
    # (its own reader ignores a first restart marker, so hiding them is not enough: issue 37)
    curve = [
        (e.step, e.summary.value[0].simple_value) for e in scalar_events(run_dir, "rlgear/timesteps_total")
    ]
    assert curve == [(t, float(t)) for t in timesteps]
    assert not [e for e in tensorboard_events(run_dir) if e.HasField("session_log")]
    aside_events = sorted(run_dir.glob("events.out.discarded.*"))
    assert {r["timesteps_total"] for r in lost} <= {e.step for e in tensorboard_events(run_dir, aside_events)}


def test_discarding_is_a_no_op_when_nothing_follows_the_checkpoint(tmp_path):
    progress = tmp_path / "progress.jsonl"
    progress.write_text('{"training_iteration": 1}\n{"training_iteration": 2}\n')
    assert discard_results_after(tmp_path, 2) == 0
    assert progress.read_text() == '{"training_iteration": 1}\n{"training_iteration": 2}\n'
    assert not (tmp_path / DISCARDED_FILE).exists()
    assert discard_results_after(tmp_path, 1) == 1
    assert progress.read_text() == '{"training_iteration": 1}\n'
    assert discard_results_after(tmp_path / "missing", 1) == 0


def test_a_fresh_run_writes_no_purge_event(tmp_path):
    run(resolved(tmp_path, stop={"training_iteration": 1}, logging={"tensorboard": True}))
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert not [e for e in tensorboard_events(run_dir) if e.HasField("session_log")]


def test_tensorboard_keeps_the_points_up_to_each_resume_point_across_resumes_in_one_second(
    tmp_path, monkeypatch
):
    # tensorboardX names its files by the second: freeze that clock so every writer gets the same time
    import tensorboardX.event_file_writer

    monkeypatch.setattr(tensorboardX.event_file_writer, "time", types.SimpleNamespace(time=lambda: 1.7e9))

    def log_run(resume, steps):
        logger = TensorBoardLogger()
        logger.open(tmp_path, {}, resume)
        for step in steps:
            logger.log({"timesteps_total": step, "x": step / 2})
        logger.close()

    log_run(None, [10, 20, 30, 40])
    (first,) = tmp_path.glob("events.out.tfevents.*")
    with open(first, "ab") as f:
        f.write(b"\x20\x00\x00")  # a record torn by the kill
    log_run(ResumePoint(2, 20), [31, 41])  # killed again before its checkpoint at 41...
    log_run(ResumePoint(2, 20), [32])  # ...so the same checkpoint is resumed, within the same second

    curve = [(e.step, e.summary.value[0].simple_value) for e in scalar_events(tmp_path, "rlgear/x")]
    assert curve == [(10, 5.0), (20, 10.0), (32, 16.0)]
    assert len(list(tmp_path.glob("events.out.discarded.*"))) == 2
