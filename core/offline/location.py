"""Where a dataset lives: an ``offline.input`` / ``offline.output`` value as a Minari id or a path.

A value starting with ``/``, ``./``, ``../`` or ``~`` (or naming an existing folder) is a path;
anything else is a Minari dataset id (``(namespace/)name-vN``, Minari's own rule), found under the
folder Minari uses: ``MINARI_DATASETS_PATH``, default ``~/.minari/datasets``. A dataset folder
holds ``data/`` (``metadata.json`` and the episodes file), as Minari lays it out, so a path and an
id name the same kind of folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rlgear.errors import ConfigError

#: Minari's ``DATASET_ID_RE`` (minari/dataset/minari_dataset.py), with the version required.
_DATASET_ID = re.compile(r"(?:[-_\w][-_\w/]*[-_\w]+/)?[-_\w]+-v\d+")
_PATH_PREFIXES = ("/", "./", "../", "~")
#: The folder inside a dataset folder that Minari reads (``minari.load_dataset`` opens ``<id>/data``).
DATA_FOLDER = "data"
METADATA_FILE = "metadata.json"


def datasets_root() -> Path:
    """Where Minari keeps datasets by id (``minari.storage.get_dataset_path`` without creating it)."""
    root = os.environ.get("MINARI_DATASETS_PATH")
    return Path(root) if root else Path.home() / ".minari" / "datasets"


@dataclass(frozen=True)
class DatasetLocation:
    """One dataset: its folder, and its Minari id when it was named by one."""

    text: str  # the value as the config gave it
    folder: Path  # the dataset folder (holds data/)
    dataset_id: str | None  # the Minari id, or None for a path

    @property
    def data_path(self) -> Path:
        return self.folder / DATA_FOLDER

    @property
    def name(self) -> str:
        """The dataset's ``dataset_id`` metadata: its id, or for a path its folder's name made a valid
        id (``name-v0`` unless it ends in a version), so Minari's ``dataset.spec`` parses it."""
        if self.dataset_id:
            return self.dataset_id
        name = re.sub(r"[^-_\w]", "_", self.folder.name) or "dataset"
        return name if _DATASET_ID.fullmatch(name) else f"{name}-v0"


def problem(value: object) -> str | None:
    """Why ``value`` names no dataset (neither a path nor a well-formed Minari id), or None."""
    if not isinstance(value, str) or not value.strip():
        return f"expected a Minari dataset id or a path, got {value!r}"
    if value.startswith(_PATH_PREFIXES) or Path(value).is_dir() or _DATASET_ID.fullmatch(value):
        return None
    return (
        f"{value!r} is neither a path (start it with /, ./, ../ or ~) nor a Minari dataset id "
        "((namespace/)name-vN, e.g. cartpole/ppo-v0)"
    )


def locate(value: str, key: str) -> DatasetLocation:
    """The location ``value`` names (``key``: the config key, for errors); no file is touched."""
    why = problem(value)
    if why is not None:
        raise ConfigError(f"{key}: {why}")
    if value.startswith(_PATH_PREFIXES) or Path(value).is_dir():
        return DatasetLocation(value, Path(value).expanduser().resolve(), None)
    return DatasetLocation(value, datasets_root() / value, value)
