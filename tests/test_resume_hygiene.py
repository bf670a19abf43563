"""Resume leaves no residue: each iteration appears once in progress.jsonl and in TensorBoard (issue 17)."""

from __future__ import annotations

import json
import struct

from rlgear import config as config_mod
from rlgear.run.logger import DISCARDED_FILE, discard_results_after
from rlgear.run.runner import run
from tests.conftest import small_config


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def resolved(tmp_path, **sections):
    return config_mod.resolve(small_config(tmp_path, **sections))


def tensorboard_events(run_dir):
    """Every Event in the run's TensorBoard files (TFRecord framing read by hand, no TensorBoard needed)."""
    from tensorboardX.proto.event_pb2 import Event

    events = []
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack_from("<Q", data, offset)
            offset += 12  # length and its CRC
            events.append(Event.FromString(data[offset : offset + length]))
            offset += length + 4  # the record and its CRC
    return events


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
    # TensorBoard: the resumed writer starts with a purge at the checkpoint's timesteps + 1,
    # which hides the steps logged by the killed run after its checkpoint.
    checkpoint_steps = rows(progress)[2]["timesteps_total"]
    starts = [e.step for e in tensorboard_events(run_dir) if e.HasField("session_log")]
    assert starts == [checkpoint_steps + 1]


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
