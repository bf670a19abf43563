"""Videos: ``rlgear evaluate --video`` and ``training.evaluation_video_every`` (mp4s, TensorBoard)."""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.cli.main import main
from rlgear.errors import ConfigError, RLGearError
from rlgear.plugins.algorithms.ppo import PPO
from rlgear.run.agent import evaluate_checkpoint
from tests.conftest import installed, small_config

needs_video = pytest.mark.skipif(
    not all(installed(m) for m in ("moviepy", "imageio", "imageio_ffmpeg", "pygame")),
    reason="needs the video extra: pip install 'rlgear[video]'",
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A CartPole run with one checkpoint (a few iterations: the policy need not be good)."""
    tmp_path = tmp_path_factory.mktemp("video")
    config = small_config(
        tmp_path,
        logging={"dir": str(tmp_path / "runs"), "name": "run", "progress": "none", "tensorboard": False},
        stop={"training_iteration": 1},
    )
    rlgear.train(config)
    return tmp_path / "runs" / "run"


def hide_modules(monkeypatch, *names):
    """Make ``importlib.util.find_spec`` report ``names`` as not installed."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in names else real(name, *a)
    )


@needs_video
def test_evaluate_records_each_episode_as_an_mp4_with_one_frame_per_step_plus_the_reset(run_dir, tmp_path):
    from rlgear.run.video import read_frames

    # horizon: short episodes keep the test fast (ffmpeg encodes every frame)
    evaluation = evaluate_checkpoint(run_dir, 2, ["workers.horizon=25"], video_dir=tmp_path / "videos")
    assert len(evaluation.episodes) == 2
    assert [p.name for p in evaluation.videos] == ["evaluation-episode-1.mp4", "evaluation-episode-2.mp4"]
    assert sorted(p.name for p in (tmp_path / "videos").iterdir()) == [p.name for p in evaluation.videos]
    for episode, path in zip(evaluation.episodes, evaluation.videos, strict=True):
        frames = read_frames(path)
        # RecordVideo captures a frame at the reset and one after every step
        assert frames.shape == (episode["length"] + 1, 400, 600, 3)
        assert frames.dtype.name == "uint8" and frames.std() > 0  # a picture, not a blank clip


@needs_video
def test_rlgear_evaluate_video_flag_prints_the_files(run_dir, tmp_path, capsys):
    args = ["evaluate", str(run_dir), "--episodes", "1", "--set", "workers.horizon=10"]
    assert main([*args, "--video", str(tmp_path / "clips")]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("video:")] == [
        f"video: {tmp_path / 'clips' / 'evaluation-episode-1.mp4'}"
    ]
    assert [p.name for p in (tmp_path / "clips").iterdir()] == ["evaluation-episode-1.mp4"]
    assert (tmp_path / "clips" / "evaluation-episode-1.mp4").stat().st_size > 1000


def test_video_without_the_extra_says_what_to_install(run_dir, tmp_path, monkeypatch, capsys):
    hide_modules(monkeypatch, "moviepy")  # the others of the extra may be missing too (a torch-only venv)
    assert main(["evaluate", str(run_dir), "--video", str(tmp_path / "v")]) == 2
    error = capsys.readouterr().err
    assert re.fullmatch(
        r"rlgear: error: --video: recording videos needs moviepy(, \w+)*: pip install 'rlgear\[video\]'\n",
        error,
    ), error
    config = small_config(tmp_path, training={"evaluation_interval": 1, "evaluation_video_every": 1})
    with pytest.raises(
        RLGearError, match=r"training.evaluation_video_every: .*pip install 'rlgear\[video\]'"
    ):
        PPO(config)


@needs_video
def test_an_env_without_rgb_array_frames_is_refused(tmp_path):
    config = small_config(
        tmp_path,
        env={"name": "tests.goal_env:GoalEnv"},
        training={"evaluation_interval": 1, "evaluation_video_every": 1},
    )
    with pytest.raises(
        ConfigError, match=r"tests.goal_env:GoalEnv cannot be recorded: it takes no render_mode"
    ):
        PPO(config)  # refused when the trainer is built, not at the first evaluation


def test_video_keys_are_checked(tmp_path):
    with pytest.raises(
        ConfigError, match=r"training.evaluation_video_every: counts evaluations, and none run"
    ):
        config_mod.resolve(small_config(tmp_path, training={"evaluation_video_every": 2}), source="run.yaml")
    with pytest.raises(ConfigError, match=r"training.evaluation_video_every: expected 0 or more"):
        config_mod.resolve(
            small_config(tmp_path, training={"evaluation_interval": 1, "evaluation_video_every": -1}),
            source="run.yaml",
        )
    with pytest.raises(ConfigError, match=r"env adapter 'external' cannot record videos"):
        config_mod.resolve(
            small_config(
                tmp_path,
                env={"name": "x", "adapter": "external"},
                training={"evaluation_interval": 1, "evaluation_video_every": 1},
            ),
            source="run.yaml",
        )


def tensorboard_events(run_dir: Path) -> list:
    """Every Event in the run's TensorBoard files (TFRecord: length, crc, payload, crc)."""
    from tensorboardX.proto.event_pb2 import Event

    events = []
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            payload = data[offset + 12 : offset + 12 + length]
            offset += 12 + length + 4
            event = Event()
            event.ParseFromString(payload)
            events.append(event)
    return events


@needs_video
def test_training_records_a_clip_every_n_evaluations_into_the_run_folder_and_tensorboard(tmp_path):
    from rlgear.run.video import read_frames

    config = small_config(
        tmp_path,
        logging={"dir": str(tmp_path / "runs"), "name": "run", "progress": "none", "tensorboard": True},
        training={"evaluation_interval": 1, "evaluation_episodes": 2, "evaluation_video_every": 2},
        workers={"horizon": 20},  # short clips: encoding them (mp4, then GIF for TensorBoard) takes the time
        stop={"training_iteration": 3},
    )
    rlgear.train(config)
    run_dir = tmp_path / "runs" / "run"
    assert sorted(p.name for p in (run_dir / "videos").iterdir()) == ["evaluation-000002.mp4"]
    rows = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    assert [row.get("evaluation/video") for row in rows] == [None, "videos/evaluation-000002.mp4", None]
    frames = read_frames(run_dir / "videos" / "evaluation-000002.mp4")
    assert 9 <= len(frames) <= 21  # 8 to 20 steps (workers.horizon), plus the reset frame

    videos = [
        (event.step, value.image)
        for event in tensorboard_events(run_dir)
        for value in event.summary.value
        if value.tag == "rlgear/evaluation/video"
    ]
    assert len(videos) == 1
    step, image = videos[0]
    assert step == rows[1]["timesteps_total"]
    assert (image.width, image.height) == (600, 400)
    assert image.encoded_image_string[:6] == b"GIF89a"  # tensorboardX writes a video as an animated GIF


def test_the_video_modules_import_nothing_of_the_extra_until_a_video_is_asked_for():
    code = (
        "import sys, json\n"
        "import rlgear.run.video, rlgear.run.logger, rlgear.run.agent\n"
        "import rlgear.plugins.envs.gymnasium_env\n"
        "print(json.dumps(sorted(m for m in ('moviepy', 'imageio', 'imageio_ffmpeg', 'pygame') if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
