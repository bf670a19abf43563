"""Exploit checkpoints that stay reachable: in memory first, on disk when memory runs short.

Population-based training clones a donor's weights from the checkpoint taken
at the donor's latest perturbation point. Peers keep such checkpoints as
object-store references that can be evicted or go stale, and a clone then
fails. Here a checkpoint is a plain ``save_to_object`` snapshot (numpy arrays
and JSON-able state) held by the driver; when the snapshots held exceed the
memory budget, the oldest are written to the experiment folder (an atomic
checkpoint folder) and read back from there when a clone needs them.
"""

from __future__ import annotations

import itertools
import shutil
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlgear.errors import CheckpointError
from rlgear.run import checkpoint as ckpt

_ids = itertools.count()


@dataclass
class TrialCheckpoint:
    """A handle on one trial's snapshot, with where and when it was taken."""

    trial_id: str
    training_iteration: int
    time_attr_value: float
    created: float = field(default_factory=time.monotonic)
    key: int = field(default_factory=lambda: next(_ids))
    path: str | None = None  # set once the snapshot lives on disk

    def describe(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial_id,
            "training_iteration": self.training_iteration,
            "time_attr_value": self.time_attr_value,
            "on_disk": self.path is not None,
        }


def snapshot_bytes(snapshot: dict[str, Any]) -> int:
    return sum(int(getattr(a, "nbytes", 0)) for a in snapshot["arrays"].values())


class CheckpointStore:
    """Snapshots keyed by :class:`TrialCheckpoint`; memory up to ``memory_bytes``, then disk."""

    def __init__(self, spill_dir: str | Path, memory_bytes: float):
        self.spill_dir = Path(spill_dir)
        self.memory_bytes = float(memory_bytes)
        self._memory: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._sizes: dict[int, int] = {}
        self._spilled_paths: dict[int, str] = {}
        self.spilled = 0

    def put(self, handle: TrialCheckpoint, snapshot: dict[str, Any]) -> TrialCheckpoint:
        self._memory[handle.key] = snapshot
        self._sizes[handle.key] = snapshot_bytes(snapshot)
        self._spill_if_needed(handle)
        return handle

    def _spill_if_needed(self, newest: TrialCheckpoint) -> None:
        while sum(self._sizes.values()) > self.memory_bytes and self._memory:
            key, snapshot = self._memory.popitem(last=False)
            self._sizes.pop(key)
            path = self.spill_dir / f"{key:08d}"
            ckpt.write(path, snapshot["arrays"], snapshot["state"], snapshot["config"], snapshot["metadata"])
            self._spilled_paths[key] = str(path)
            if key == newest.key:
                newest.path = str(path)
            self.spilled += 1

    def get(self, handle: TrialCheckpoint) -> dict[str, Any]:
        """The snapshot, from memory or from its disk copy; CheckpointError if neither exists."""
        if handle.key in self._memory:
            return self._memory[handle.key]
        path = handle.path or self._spilled_paths.get(handle.key)
        if path is None:
            raise CheckpointError(f"exploit checkpoint of {handle.trial_id} was released")
        handle.path = path
        arrays, state, config, metadata = ckpt.read(path)
        return {"arrays": arrays, "state": state, "config": config, "metadata": metadata}

    def release(self, handle: TrialCheckpoint) -> None:
        """Forget a snapshot that no scheduler will clone any more (its trial checkpointed again)."""
        self._memory.pop(handle.key, None)
        self._sizes.pop(handle.key, None)
        path = self._spilled_paths.pop(handle.key, None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def memory_in_use(self) -> int:
        return sum(self._sizes.values())
