"""Checkpoint files: safetensors for arrays, JSON and YAML for the rest, never pickle.

A checkpoint folder ``checkpoint_NNNNNN/`` holds

* ``arrays.safetensors`` - weights (framework-neutral names), optimizer
  tensors, framework RNG state;
* ``state.json`` - counters, metrics window, policy meta, RNG states;
* ``config.yaml`` - the resolved run config;
* ``metadata.json`` - format version, rlgear version, algorithm, backend and
  the env's spaces (so a policy can be rebuilt without creating an env).
  It is written last: a folder without it is not a checkpoint.

Writes are atomic: everything goes to a hidden temporary folder beside the
target, which is renamed into place only when complete. An interrupted save
leaves the previous checkpoints untouched and loadable.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlgear.errors import CheckpointError

FORMAT_VERSION = 1
ARRAYS_FILE = "arrays.safetensors"
STATE_FILE = "state.json"
CONFIG_FILE = "config.yaml"
METADATA_FILE = "metadata.json"
_NAME = re.compile(r"^checkpoint_(\d{6,})$")


def checkpoint_name(iteration: int) -> str:
    return f"checkpoint_{iteration:06d}"


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, allow_nan=True))


def write(
    path: str | os.PathLike,
    arrays: dict[str, np.ndarray],
    state: dict[str, Any],
    config: dict[str, Any],
    metadata: dict[str, Any],
) -> Path:
    """Write a checkpoint folder at ``path`` atomically (temp folder + rename)."""
    from safetensors.numpy import save_file

    from rlgear.config import dump_yaml

    bad = [k for k, v in arrays.items() if np.asarray(v).dtype.kind == "f" and not np.isfinite(v).all()]
    if bad:  # checked before anything is written: no half checkpoint, no poisoned one
        from rlgear.errors import NonFiniteError

        raise NonFiniteError(
            f"{path}: not written: {len(bad)} array(s) hold NaN or infinity ({', '.join(bad[:5])}); "
            "a checkpoint never stores non-finite weights, the previous checkpoints are untouched"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        contiguous = {k: np.asarray(v, order="C") for k, v in arrays.items()}  # keeps 0-d arrays 0-d
        save_file(contiguous, str(tmp / ARRAYS_FILE))
        _write_json(tmp / STATE_FILE, state)
        (tmp / CONFIG_FILE).write_text(dump_yaml(config))  # secrets redacted
        _write_json(tmp / METADATA_FILE, {"format_version": FORMAT_VERSION, **metadata})
        _fsync_dir_files(tmp)
        if path.exists():
            old = path.parent / f".{path.name}.old-{os.getpid()}"
            os.rename(path, old)
            try:
                os.rename(tmp, path)
            except BaseException:
                os.rename(old, path)  # put the existing checkpoint back
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _fsync_dir_files(folder: Path) -> None:
    for file in folder.iterdir():
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())


def read(
    path: str | os.PathLike,
) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(arrays, state, config, metadata)`` of a checkpoint folder."""
    from safetensors.numpy import load_file

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint folder")
    meta_file = path / METADATA_FILE
    if not meta_file.exists():
        raise CheckpointError(f"{path}: not a complete checkpoint (no {METADATA_FILE})")
    try:
        metadata = json.loads(meta_file.read_text())
        version = metadata.get("format_version")
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"{path}: checkpoint format {version} is not supported by this rlgear (format {FORMAT_VERSION})"
            )
        arrays = load_file(str(path / ARRAYS_FILE))
        state = json.loads((path / STATE_FILE).read_text())
        config = yaml.safe_load((path / CONFIG_FILE).read_text())
    except CheckpointError:
        raise
    except Exception as err:  # OSError, JSON/YAML errors, safetensors' own SafetensorError
        raise CheckpointError(f"{path}: damaged checkpoint: {type(err).__name__}: {err}") from err
    return arrays, state, config, metadata


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints in a run folder, oldest first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = []
    for child in run_dir.iterdir():
        match = _NAME.match(child.name)
        if match and (child / METADATA_FILE).exists():
            found.append((int(match.group(1)), child))
    return [p for _, p in sorted(found)]


def latest(run_dir: str | os.PathLike) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def prune(run_dir: str | os.PathLike, keep: int | None) -> list[Path]:
    """Delete all but the newest ``keep`` checkpoints; returns what was deleted."""
    if keep is None:
        return []
    found = list_checkpoints(run_dir)
    doomed = found[:-keep] if keep > 0 else found
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def resolve_path(path: str | os.PathLike) -> Path:
    """A checkpoint folder, or the newest checkpoint of a run folder."""
    path = Path(path)
    if (path / METADATA_FILE).exists():
        return path
    newest = latest(path)
    if newest is None:
        if not path.exists():
            raise CheckpointError(f"{path}: no such checkpoint or run folder")
        raise CheckpointError(f"{path}: no complete checkpoint found here")
    return newest


#: Where a policy's arrays live: ``policy/<policy id>/weights/<neutral name>``,
#: ``policy/<policy id>/optimizer/...`` (checkpoints before policy sets had ``policy/weights/...``).
POLICY_PREFIX = "policy/"


def policy_prefix(policy_id: str) -> str:
    return f"{POLICY_PREFIX}{policy_id}/"


def checkpoint_policy_ids(arrays: dict[str, Any], state: dict[str, Any]) -> list[str]:
    """The policies a checkpoint holds (``["default"]`` for one written before policy sets)."""
    metas = state.get("policy_metas")
    if metas is None:
        return ["default"]
    return list(metas)


def policy_arrays(arrays: dict[str, Any], policy_id: str) -> dict[str, Any]:
    """Policy ``policy_id``'s arrays (``weights/...``, ``optimizer/...``), its prefix removed.

    The ``default`` policy also reads the unprefixed names of checkpoints written before policy
    sets (``policy/weights/...``), so those keep loading unchanged.
    """
    prefix = policy_prefix(policy_id)
    found = {
        k.removeprefix(prefix): v
        for k, v in arrays.items()
        if k.startswith(prefix) and not k.removeprefix(prefix).startswith(OBS_FILTER_KEY)
    }
    if found or policy_id != "default":
        return found
    legacy = ("weights/", "optimizer/")
    return {
        k.removeprefix(POLICY_PREFIX): v
        for k, v in arrays.items()
        if k.startswith(POLICY_PREFIX) and k.removeprefix(POLICY_PREFIX).startswith(legacy)
    }


#: A policy's observation-filter statistics (``model.observation_filter``): ``obs_filter/<key>`` in a
#: run with one policy (the layout before policy sets), ``policy/<policy id>/obs_filter/<key>`` with several.
OBS_FILTER_KEY = "obs_filter/"


def obs_filter_prefix(policy_id: str, several: bool) -> str:
    """Where policy ``policy_id``'s observation-filter statistics are kept (see :data:`OBS_FILTER_KEY`)."""
    return f"{policy_prefix(policy_id)}{OBS_FILTER_KEY}" if several else OBS_FILTER_KEY


def obs_filter_arrays(arrays: dict[str, Any], policy_id: str, several: bool) -> dict[str, Any]:
    """Policy ``policy_id``'s observation-filter statistics, their prefix removed (empty: none kept)."""
    prefix = obs_filter_prefix(policy_id, several)
    return {k.removeprefix(prefix): v for k, v in arrays.items() if k.startswith(prefix)}


def policy_weights(arrays: dict[str, Any], policy_id: str) -> dict[str, Any]:
    """Policy ``policy_id``'s framework-neutral weights."""
    return {
        k.removeprefix("weights/"): v
        for k, v in policy_arrays(arrays, policy_id).items()
        if k.startswith("weights/")
    }
