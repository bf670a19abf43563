"""Tests of checkpoints: the file format (``rlgear.run.checkpoint``) and Trainer save/restore/load.

docs/architecture.md, "Results and checkpoints": a checkpoint is written to a temporary
folder and renamed into place (never half-written); weights in safetensors
with framework-neutral names, the rest in JSON (no pickle); it holds
everything needed to continue exactly: weights, optimizer state, counters,
RNG state, algorithm state.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

import rlgear
from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import CheckpointError
from rlgear.run import checkpoint as ckpt
from rlgear.spaces import Discrete
from rlgear.timestep import StepType, TimeStep

# ----------------------------------------------------------------------------- helpers


def sample_arrays(value: float) -> dict[str, np.ndarray]:
    return {
        "policy/weights/policy/hidden_0/kernel": np.full((4, 3), value, dtype=np.float32),
        "policy/weights/policy/hidden_0/bias": np.arange(3, dtype=np.float32) + value,
        "policy/optimizer/0/exp_avg": np.linspace(-1, 1, 6, dtype=np.float64).reshape(2, 3) * value,
        "rng/torch": np.arange(16, dtype=np.uint8),
        "counts": np.array([1, 2, 3], dtype=np.int64),
    }


def write_sample(run_dir: Path, iteration: int, value: float = 1.0) -> Path:
    return ckpt.write(
        run_dir / ckpt.checkpoint_name(iteration),
        sample_arrays(value),
        {"counters": {"training_iteration": iteration}, "value": value, "nan": float("nan")},
        {"algorithm": "ppo", "training": {"lr": 0.001}},
        {"algorithm": "ppo", "training_iteration": iteration},
    )


def assert_reads_back(path: Path, iteration: int, value: float) -> None:
    arrays, state, config, metadata = ckpt.read(path)
    expected = sample_arrays(value)
    assert set(arrays) == set(expected)
    for name, array in expected.items():
        assert arrays[name].dtype == array.dtype, name
        assert arrays[name].shape == array.shape, name
        np.testing.assert_array_equal(arrays[name], array, err_msg=name)
    assert state["counters"] == {"training_iteration": iteration}
    assert state["value"] == value
    assert np.isnan(state["nan"])
    assert config == {"algorithm": "ppo", "training": {"lr": 0.001}}
    assert metadata == {
        "format_version": ckpt.FORMAT_VERSION,
        "algorithm": "ppo",
        "training_iteration": iteration,
    }


def failing_save_file(tensors, filename, metadata=None):
    """Stands in for safetensors.numpy.save_file: writes part of the file, then fails."""
    with open(filename, "wb") as handle:
        handle.write(struct.pack("<Q", 4096) + b'{"policy/weights/po')
    raise OSError(28, "No space left on device")


def raw_config(tmp_path, env="CartPole-v1", model=None, training=None):
    training_section = {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2}
    training_section.update(training or {})
    return {
        "algorithm": "ppo",
        "seed": 0,
        "env": {"name": env},
        "workers": {"num_envs_per_worker": 2},
        "training": training_section,
        "model": {"hidden_sizes": [16], **(model or {})},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }


def timestep_of(observations, action_space):
    n = len(observations)
    action_dtype = np.int64 if isinstance(action_space, Discrete) else np.float32
    return TimeStep(
        step_type=np.full(n, StepType.MID, dtype=np.int32),
        reward=np.zeros(n, dtype=np.float32),
        discount=np.ones(n, dtype=np.float32),
        observation=observations,
        prev_action=np.zeros((n, *action_space.shape), dtype=action_dtype),
        env_id=np.arange(n, dtype=np.int32),
    )


def assert_weights_equal(a, b):
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def optimizer_arrays(policy) -> dict[str, np.ndarray]:
    """The optimizer tensors of the policy's state (PolicyState.arrays under ``optimizer/``)."""
    arrays = policy.get_state().arrays
    return {key: np.array(value) for key, value in arrays.items() if key.startswith("optimizer/")}


@pytest.fixture
def make_trainer(tmp_path):
    """Build PPO trainers from raw config mappings; every one is stopped at teardown."""
    trainers = []

    def make(raw, logdir=None):
        config = config_mod.resolve(raw)
        trainer = registry.load_algorithm("ppo")(config, logdir=logdir or tmp_path / f"run{len(trainers)}")
        trainers.append(trainer)
        return trainer

    yield make
    for trainer in trainers:
        trainer.stop()


# ------------------------------------------------------------------ the file format


def test_write_then_read_round_trips_arrays_state_config_and_metadata(tmp_path):
    path = write_sample(tmp_path, 3, value=2.5)
    assert path == tmp_path / "checkpoint_000003"
    assert sorted(os.listdir(path)) == sorted(
        [ckpt.ARRAYS_FILE, ckpt.STATE_FILE, ckpt.CONFIG_FILE, ckpt.METADATA_FILE]
    )
    assert_reads_back(path, 3, 2.5)


def test_zero_dimensional_arrays_keep_their_shape(tmp_path):
    # Optimizer step counters are 0-d tensors (torch Adam's state["step"]).
    arrays = {"scalar": np.array(7.0, dtype=np.float32), "count": np.array(3, dtype=np.int64)}
    path = ckpt.write(tmp_path / "checkpoint_000001", arrays, {}, {}, {})
    read_back, _, _, _ = ckpt.read(path)
    assert read_back["scalar"].shape == ()
    assert read_back["count"].shape == ()
    assert read_back["scalar"] == 7.0


def test_failed_save_propagates_and_leaves_previous_checkpoint_intact(tmp_path, monkeypatch):
    good = write_sample(tmp_path, 1, value=1.0)
    monkeypatch.setattr("safetensors.numpy.save_file", failing_save_file)
    with pytest.raises(OSError, match="No space left"):
        write_sample(tmp_path, 2, value=2.0)
    # no checkpoint_000002, no temporary folder: only the good checkpoint remains
    assert os.listdir(tmp_path) == [good.name]
    assert ckpt.list_checkpoints(tmp_path) == [good]
    assert ckpt.latest(tmp_path) == good
    assert_reads_back(good, 1, 1.0)


def test_failed_save_of_non_array_part_leaves_no_folder(tmp_path, monkeypatch):
    def failing_dump(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C in the middle of a save

    write_sample(tmp_path, 1)
    monkeypatch.setattr(ckpt.yaml, "safe_dump", failing_dump)
    with pytest.raises(KeyboardInterrupt):
        write_sample(tmp_path, 2)
    assert os.listdir(tmp_path) == ["checkpoint_000001"]


def test_overwriting_a_checkpoint_replaces_it_and_leaves_nothing_behind(tmp_path):
    path = write_sample(tmp_path, 1, value=1.0)
    again = write_sample(tmp_path, 1, value=9.0)
    assert again == path
    assert_reads_back(path, 1, 9.0)
    assert os.listdir(tmp_path) == [path.name]


def test_failed_overwrite_keeps_the_existing_checkpoint(tmp_path, monkeypatch):
    path = write_sample(tmp_path, 1, value=1.0)
    monkeypatch.setattr("safetensors.numpy.save_file", failing_save_file)
    with pytest.raises(OSError, match="No space left"):
        write_sample(tmp_path, 1, value=9.0)
    assert os.listdir(tmp_path) == [path.name]
    assert_reads_back(path, 1, 1.0)


def test_overwrite_interrupted_while_swapping_folders_keeps_the_existing_checkpoint(tmp_path, monkeypatch):
    """The swap is rename(old -> aside) then rename(new -> old); if the second fails, the old must survive."""
    path = write_sample(tmp_path, 1, value=1.0)
    real_rename = os.rename
    calls = []

    def rename(src, dst):
        calls.append((Path(src).name, Path(dst).name))
        if Path(dst) == path and ".tmp" in Path(src).name:  # moving the new folder into place
            raise OSError(5, "Input/output error")
        return real_rename(src, dst)

    monkeypatch.setattr(ckpt.os, "rename", rename)
    monkeypatch.setattr(ckpt.os, "replace", rename)
    with pytest.raises(OSError):
        write_sample(tmp_path, 1, value=9.0)
    monkeypatch.undo()
    assert calls, "write() no longer swaps with os.rename; update this test"
    assert ckpt.list_checkpoints(tmp_path) == [path]
    assert_reads_back(path, 1, 1.0)
    assert os.listdir(tmp_path) == [path.name]


def test_folder_without_metadata_is_not_a_checkpoint(tmp_path):
    write_sample(tmp_path, 1)
    incomplete = write_sample(tmp_path, 2)
    (incomplete / ckpt.METADATA_FILE).unlink()
    assert ckpt.list_checkpoints(tmp_path) == [tmp_path / "checkpoint_000001"]
    assert ckpt.latest(tmp_path) == tmp_path / "checkpoint_000001"
    assert ckpt.resolve_path(tmp_path) == tmp_path / "checkpoint_000001"
    with pytest.raises(CheckpointError, match=r"not a complete checkpoint.*metadata\.json"):
        ckpt.read(incomplete)


def test_read_of_missing_folder_raises_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        ckpt.read(tmp_path / "checkpoint_000001")


def test_wrong_format_version_is_refused_with_a_clear_message(tmp_path):
    path = write_sample(tmp_path, 1)
    meta_file = path / ckpt.METADATA_FILE
    metadata = json.loads(meta_file.read_text())
    metadata["format_version"] = ckpt.FORMAT_VERSION + 41
    meta_file.write_text(json.dumps(metadata))
    with pytest.raises(CheckpointError) as info:
        ckpt.read(path)
    message = str(info.value)
    assert str(path) in message
    assert f"format {ckpt.FORMAT_VERSION + 41}" in message
    assert "not supported" in message
    assert f"format {ckpt.FORMAT_VERSION}" in message


def test_missing_format_version_is_refused(tmp_path):
    path = write_sample(tmp_path, 1)
    (path / ckpt.METADATA_FILE).write_text(json.dumps({"algorithm": "ppo"}))
    with pytest.raises(CheckpointError, match="not supported"):
        ckpt.read(path)


def test_malformed_state_json_raises_checkpoint_error(tmp_path):
    path = write_sample(tmp_path, 1)
    (path / ckpt.STATE_FILE).write_text('{"counters": ')
    with pytest.raises(CheckpointError, match="damaged"):
        ckpt.read(path)


def test_truncated_arrays_file_raises_checkpoint_error(tmp_path):
    path = write_sample(tmp_path, 1)
    with open(path / ckpt.ARRAYS_FILE, "r+b") as handle:
        handle.truncate(20)
    with pytest.raises(CheckpointError, match="damaged"):
        ckpt.read(path)


def test_list_checkpoints_orders_numerically_and_ignores_other_entries(tmp_path):
    for iteration in (10, 2, 1_000_000, 9):
        write_sample(tmp_path, iteration)
    (tmp_path / "checkpoint_12").mkdir()  # too few digits: not ours
    (tmp_path / ".checkpoint_000011.tmp-123").mkdir()  # an interrupted save
    (tmp_path / "progress.jsonl").write_text("{}\n")
    names = [p.name for p in ckpt.list_checkpoints(tmp_path)]
    assert names == ["checkpoint_000002", "checkpoint_000009", "checkpoint_000010", "checkpoint_1000000"]
    assert ckpt.latest(tmp_path) == tmp_path / "checkpoint_1000000"


def test_list_and_latest_of_missing_or_empty_folder(tmp_path):
    assert ckpt.list_checkpoints(tmp_path / "nope") == []
    assert ckpt.latest(tmp_path) is None


def test_prune_keeps_the_newest_k(tmp_path):
    for iteration in range(1, 6):
        write_sample(tmp_path, iteration)
    deleted = ckpt.prune(tmp_path, 2)
    assert [p.name for p in deleted] == ["checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["checkpoint_000004", "checkpoint_000005"]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_000004", "checkpoint_000005"]
    assert_reads_back(tmp_path / "checkpoint_000005", 5, 1.0)


def test_prune_with_keep_none_or_more_than_present_deletes_nothing(tmp_path):
    for iteration in range(1, 8):  # more than checkpoint.keep's default (5): null keeps them all
        write_sample(tmp_path, iteration)
    assert ckpt.prune(tmp_path, None) == []
    assert ckpt.prune(tmp_path, 10) == []
    assert len(ckpt.list_checkpoints(tmp_path)) == 7


def test_resolve_path_accepts_checkpoint_or_run_folder(tmp_path):
    first = write_sample(tmp_path, 1)
    second = write_sample(tmp_path, 2)
    assert ckpt.resolve_path(first) == first
    assert ckpt.resolve_path(tmp_path) == second
    assert ckpt.resolve_path(str(tmp_path)) == second


def test_resolve_path_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint or run folder"):
        ckpt.resolve_path(tmp_path / "missing")
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        ckpt.resolve_path(tmp_path / "empty_run")


# ------------------------------------------------------------------ trainer: save/restore


def test_trainer_checkpoint_files_contain_no_pickle(tmp_path, make_trainer):
    trainer = make_trainer(raw_config(tmp_path))
    trainer.train()
    path = Path(trainer.save())
    assert sorted(os.listdir(path)) == sorted(
        [ckpt.ARRAYS_FILE, ckpt.STATE_FILE, ckpt.CONFIG_FILE, ckpt.METADATA_FILE]
    )

    # arrays: safetensors = 8-byte little-endian header length, JSON header, raw data
    data = (path / ckpt.ARRAYS_FILE).read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    header.pop("__metadata__", None)
    body_len = len(data) - 8 - header_len
    spans = sorted(tuple(entry["data_offsets"]) for entry in header.values())
    assert spans[0][0] == 0
    assert spans[-1][1] == body_len
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # contiguous, no gaps
    weights = trainer.policy.get_weights()
    for name, value in weights.items():
        entry = header[f"policy/default/weights/{name}"]  # <policy id>/<neutral name>
        assert entry["dtype"] == "F32"
        assert tuple(entry["shape"]) == value.shape
    assert any(key.startswith("policy/default/optimizer/") for key in header)
    assert header["rng/torch"]["dtype"] == "U8"

    # the rest: JSON and safe YAML
    state = json.loads((path / ckpt.STATE_FILE).read_text())
    metadata = json.loads((path / ckpt.METADATA_FILE).read_text())
    config = yaml.safe_load((path / ckpt.CONFIG_FILE).read_text())
    assert state["counters"]["training_iteration"] == 1
    assert metadata["format_version"] == ckpt.FORMAT_VERSION
    assert metadata["algorithm"] == "ppo"
    assert config["env"]["name"] == "CartPole-v1"
    for file in path.iterdir():
        raw = file.read_bytes()
        assert not raw.startswith(b"\x80"), f"{file.name} looks like a pickle"
        for marker in (b"\x80\x04\x95", b"\x80\x05\x95", b"numpy.core", b"__reduce__", b"!!python"):
            assert marker not in raw, (file.name, marker)


@pytest.fixture
def restored(tmp_path, make_trainer):
    """A PPO trainer trained 2 iterations and saved, what it saved, and a fresh trainer restored from it."""
    raw = raw_config(tmp_path)
    trainer = make_trainer(raw)
    trainer.train()
    trainer.train()
    torch.rand(11)  # move the global torch RNG (acting may not draw from it)
    path = trainer.save()
    saved = SimpleNamespace(
        path=path,
        trainer=trainer,
        weights=trainer.policy.get_weights(),
        optimizer=optimizer_arrays(trainer.policy),
        policy_meta=copy.deepcopy(trainer.policy.get_state().meta),
        torch_rng=torch.get_rng_state().clone(),
        policy_rng=copy.deepcopy(trainer.policy.rng.bit_generator.state),
        acting_rng=copy.deepcopy(trainer.policy.fast_actor.rng.bit_generator.state),
        metrics=copy.deepcopy(trainer.metrics.get_state()),
        counters=(trainer.iteration, trainer.timesteps_total, trainer.episodes_total),
    )
    assert saved.counters[0] == 2 and saved.counters[1] > 0 and saved.counters[2] > 0 and saved.metrics

    fresh = make_trainer(raw)
    # the fresh trainer really starts elsewhere, so equality after restore means something
    assert not torch.equal(torch.get_rng_state(), saved.torch_rng)
    assert fresh.policy.rng.bit_generator.state != saved.policy_rng
    assert fresh.policy.fast_actor.rng.bit_generator.state != saved.acting_rng
    assert fresh.iteration == 0 and fresh.metrics.get_state() == []
    fresh.restore(path)
    return saved, fresh


def test_save_names_the_checkpoint_after_the_iteration(restored):
    saved, _ = restored
    assert Path(saved.path) == saved.trainer.logdir / "checkpoint_000002"


def test_restore_brings_back_weights(restored):
    saved, fresh = restored
    assert_weights_equal(fresh.policy.get_weights(), saved.weights)


def test_restore_brings_back_optimizer_state(restored):
    saved, fresh = restored
    assert saved.optimizer, "the policy state holds no optimizer tensors"
    restored_optimizer = optimizer_arrays(fresh.policy)
    assert restored_optimizer.keys() == saved.optimizer.keys()
    for key, value in saved.optimizer.items():
        assert restored_optimizer[key].dtype == value.dtype, key
        assert restored_optimizer[key].shape == value.shape, key
        np.testing.assert_array_equal(restored_optimizer[key], value, err_msg=key)
    # optimizer hyperparameters and step counts, counters, rng states
    assert fresh.policy.get_state().meta == saved.policy_meta
    assert fresh.policy.num_grad_updates == saved.trainer.policy.num_grad_updates


def test_restore_brings_back_counters_and_metrics_window(restored):
    saved, fresh = restored
    assert (fresh.iteration, fresh.timesteps_total, fresh.episodes_total) == saved.counters
    assert fresh.time_total_s == pytest.approx(saved.trainer.time_total_s)
    assert fresh.metrics.get_state() == saved.metrics
    assert fresh.metrics.stats() == saved.trainer.metrics.stats()


def test_restore_brings_back_torch_and_policy_rng_states(restored):
    saved, fresh = restored
    assert torch.equal(torch.get_rng_state(), saved.torch_rng)
    assert fresh.policy.rng.bit_generator.state == saved.policy_rng
    assert fresh.policy.fast_actor.rng.bit_generator.state == saved.acting_rng


def test_training_continues_after_restore_with_counters_counting_on(restored):
    saved, fresh = restored
    result = fresh.train()
    assert result["training_iteration"] == 3
    assert result["timesteps_total"] > saved.counters[1]
    assert result["episodes_total"] >= saved.counters[2]
    assert Path(fresh.save()).name == "checkpoint_000003"


def test_restored_trainer_learns_exactly_like_the_original(tmp_path, make_trainer):
    raw = raw_config(tmp_path)
    trainer = make_trainer(raw)
    trainer.train()
    path = trainer.save()
    fresh = make_trainer(raw)
    fresh.restore(path)
    batch = trainer.workers.local_worker.sample()
    stats_original = trainer.policy.learn_on_batch(batch)
    stats_restored = fresh.policy.learn_on_batch(batch)
    assert stats_restored == stats_original
    assert_weights_equal(fresh.policy.get_weights(), trainer.policy.get_weights())


def test_restore_from_run_folder_uses_newest_checkpoint(tmp_path, make_trainer):
    raw = raw_config(tmp_path)
    trainer = make_trainer(raw)
    trainer.train()
    trainer.save()
    trainer.train()
    trainer.save()
    fresh = make_trainer(raw)
    fresh.restore(trainer.logdir)
    assert fresh.iteration == 2
    assert_weights_equal(fresh.policy.get_weights(), trainer.policy.get_weights())


def test_restore_into_trainer_with_different_env_raises_checkpoint_error(tmp_path, make_trainer):
    trainer = make_trainer(raw_config(tmp_path))
    trainer.train()
    path = trainer.save()
    other = make_trainer(raw_config(tmp_path, env="Acrobot-v1"))
    before = other.policy.get_weights()
    with pytest.raises(CheckpointError, match="observation_space"):
        other.restore(path)
    assert other.iteration == 0
    assert_weights_equal(other.policy.get_weights(), before)


def test_restore_into_trainer_with_different_model_raises_checkpoint_error(tmp_path, make_trainer):
    trainer = make_trainer(raw_config(tmp_path))
    trainer.train()
    path = trainer.save()
    other = make_trainer(raw_config(tmp_path, model={"hidden_sizes": [8]}))
    # A checkpoint the trainer cannot take is the user's to fix: an RLGearError, not a bare ValueError.
    with pytest.raises(CheckpointError, match="policy/hidden_0/kernel"):
        other.restore(path)


def test_restore_into_trainer_with_different_optimizer_is_refused_before_any_change(tmp_path, make_trainer):
    """Adam's moments cannot feed SGD, and a resume must be exact (optimizer state included), so the
    restore is refused with a CheckpointError naming both optimizers, and the trainer is left as it was."""
    trainer = make_trainer(raw_config(tmp_path))
    trainer.train()
    path = trainer.save()
    other = make_trainer(raw_config(tmp_path, training={"optimizer": "sgd"}))
    before = other.policy.get_weights()
    with pytest.raises(CheckpointError, match=r"optimizer state of Adam, this policy uses SGD"):
        other.restore(path)
    assert other.iteration == 0 and other.timesteps_total == 0
    assert_weights_equal(other.policy.get_weights(), before)


def test_restore_of_missing_path_raises_checkpoint_error(tmp_path, make_trainer):
    trainer = make_trainer(raw_config(tmp_path))
    with pytest.raises(CheckpointError):
        trainer.restore(tmp_path / "no_such_run")


def test_save_twice_at_same_iteration_overwrites(tmp_path, make_trainer):
    trainer = make_trainer(raw_config(tmp_path))
    trainer.train()
    first = trainer.save()
    trainer.policy.set_weights({k: v + 1 for k, v in trainer.policy.get_weights().items()})
    second = trainer.save()
    assert first == second
    assert os.listdir(trainer.logdir) == ["checkpoint_000001"]
    assert_weights_equal(rlgear.load(second).policy.get_weights(), trainer.policy.get_weights())


# --------------------------------------------------------------------------- rlgear.load


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_loaded_policy_acts_like_the_trainers_greedy_policy(tmp_path, make_trainer, env):
    trainer = make_trainer(raw_config(tmp_path, env=env))
    trainer.train()
    path = trainer.save()
    loaded = rlgear.load(path)

    space = trainer.workers.local_worker.observation_space
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, size=(12, *space.shape)).astype(np.float32)
    expected, _, _ = trainer.policy.compute_actions(
        timestep_of(obs, trainer.policy.action_space), explore=False
    )

    np.testing.assert_array_equal(
        loaded.policy.action_distribution_inputs(obs), trainer.policy.action_distribution_inputs(obs)
    )
    np.testing.assert_array_equal(loaded.compute_actions(obs), expected)
    for i in range(len(obs)):
        action = loaded.compute_single_action(obs[i])
        # the same batch size as the loaded policy's call: bit-identical arithmetic
        (greedy,), _, _ = trainer.policy.compute_actions(
            timestep_of(obs[i : i + 1], trainer.policy.action_space), explore=False
        )
        if env == "CartPole-v1":
            assert type(action) is int
            assert action == int(greedy) == int(expected[i])
        else:
            assert isinstance(action, np.ndarray)
            assert action.shape == (1,)
            np.testing.assert_array_equal(action, greedy)
            np.testing.assert_allclose(action, expected[i], rtol=1e-5, atol=1e-7)


def test_load_of_run_folder_picks_the_newest_checkpoint(tmp_path, make_trainer):
    trainer = make_trainer(raw_config(tmp_path))
    trainer.train()
    trainer.save()
    weights_1 = trainer.policy.get_weights()
    trainer.train()
    trainer.save()
    weights_2 = trainer.policy.get_weights()
    assert any(not np.array_equal(weights_1[k], weights_2[k]) for k in weights_1)

    loaded = rlgear.load(trainer.logdir)
    assert_weights_equal(loaded.policy.get_weights(), weights_2)


def test_load_of_folder_without_checkpoint_raises_checkpoint_error(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(CheckpointError):
        rlgear.load(tmp_path / "run")


# -------------------------------------------------------------------- reset_config


def test_reset_config_takes_new_learning_rate_in_place(tmp_path, make_trainer):
    raw = raw_config(tmp_path)
    trainer = make_trainer(raw)
    trainer.train()
    weights = trainer.policy.get_weights()
    policy = trainer.policy

    new_raw = copy.deepcopy(raw)
    new_raw["training"]["lr"] = 0.0123
    assert trainer.reset_config(config_mod.resolve(new_raw)) is True
    assert trainer.config.training.lr == 0.0123
    assert trainer.policy is policy  # not rebuilt
    assert trainer.policy.config.training.lr == 0.0123
    assert_weights_equal(trainer.policy.get_weights(), weights)
    result = trainer.train()
    assert result["training_iteration"] == 2
    assert result["learner/cur_lr"] == pytest.approx(0.0123)


def test_reset_config_accepts_a_raw_mapping(tmp_path, make_trainer):
    raw = raw_config(tmp_path)
    trainer = make_trainer(raw)
    new_raw = copy.deepcopy(raw)
    new_raw["training"]["lr"] = 0.002
    assert trainer.reset_config(new_raw) is True
    assert trainer.policy.config.training.lr == 0.002


def test_reset_config_refuses_a_model_change(tmp_path, make_trainer):
    raw = raw_config(tmp_path)
    trainer = make_trainer(raw)
    new_raw = copy.deepcopy(raw)
    new_raw["model"]["hidden_sizes"] = [32, 32]
    new_raw["training"]["lr"] = 0.05
    assert trainer.reset_config(config_mod.resolve(new_raw)) is False
    # nothing changed, not even the resettable part
    assert trainer.config.model.hidden_sizes == [16]
    assert trainer.config.training.lr == trainer.policy.config.training.lr == 3e-4
