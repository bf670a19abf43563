"""The sidecar ``PATH.json`` beside an exported policy, and writing both without half-written files.

Why a sidecar: a player in C++ or C# needs the input and output names, dtypes and shapes, the
spaces and the preprocessing without reading rlgear's code; and ``rlgear export --check``
needs to know which checkpoint (and which config, by hash) the file came from.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlgear.errors import RLGearError

#: Bumped when the sidecar's fields change meaning.
SIDECAR_VERSION = 1


def sidecar_path(path: str | os.PathLike) -> Path:
    """``model.onnx`` -> ``model.onnx.json`` (a SavedModel folder ``policy`` -> ``policy.json``)."""
    path = Path(path)
    return path.with_name(path.name + ".json")


def config_hash(raw_config: dict[str, Any]) -> str:
    """sha256 of the config as canonical JSON (sorted keys): the same config gives the same hash."""
    text = json.dumps(raw_config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def file_hash(path: str | os.PathLike) -> str:
    """sha256 of a file, or of a folder's files (names and contents, in sorted order)."""
    path = Path(path)
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if file != path:
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def read_sidecar(path: str | os.PathLike) -> dict[str, Any]:
    """The sidecar of the exported file ``path``; a one-line error when it is missing or unreadable."""
    side = sidecar_path(path)
    if not Path(path).exists():
        raise RLGearError(f"{path}: no such exported policy")
    try:
        data = json.loads(side.read_text())
    except FileNotFoundError:
        raise RLGearError(f"{path}: its sidecar {side} is missing (rlgear export writes both)") from None
    except (OSError, ValueError) as err:
        raise RLGearError(f"{side}: not a readable sidecar ({err})") from None
    if not isinstance(data, dict) or data.get("sidecar_version") != SIDECAR_VERSION:
        raise RLGearError(f"{side}: not an rlgear export sidecar of version {SIDECAR_VERSION}")
    return data


def prepare_out(out: str | os.PathLike, is_folder: bool) -> Path:
    """The output path, its parent folder created; refused clearly when it cannot be written."""
    out = Path(out)
    if out.name in ("", ".", ".."):
        raise RLGearError(f"--out {out}: expected a file path, not a folder")
    parent = out.parent
    if parent.exists() and not parent.is_dir():
        raise RLGearError(f"--out {out}: {parent} exists and is not a folder")
    if is_folder and out.exists() and not (out / "saved_model.pb").exists():
        raise RLGearError(f"--out {out}: exists and is not a SavedModel; remove it or choose another path")
    if not is_folder and out.is_dir():
        raise RLGearError(f"--out {out}: is a folder; give a file path (e.g. {out / 'policy.onnx'})")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RLGearError(f"--out {out}: cannot create {parent}: {err.strerror or err}") from None
    return out


@contextlib.contextmanager
def atomic_target(out: Path) -> Iterator[Path]:
    """A temporary path beside ``out`` to write to; moved onto ``out`` only if the block succeeds
    (a file replaces atomically; a folder replaces the previous export), removed otherwise."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    _remove(tmp)
    try:
        yield tmp
    except BaseException:
        _remove(tmp)
        raise
    if tmp.is_dir():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        _remove(old)
    else:
        os.replace(tmp, out)


def write_sidecar(out: Path, data: dict[str, Any]) -> Path:
    """Write the sidecar of ``out`` atomically."""
    side = sidecar_path(out)
    with atomic_target(side) as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n")
    return side


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()
