"""The writer of ``offline.output``: a run's finished episodes as a Minari dataset.

The rollout workers assemble whole raw episodes
(:class:`~rlgear.sampling.episode_recorder.EpisodeRecorder`) and hand them to the driver with the
episode metrics; the Trainer gives them to one :class:`DatasetRecorder`, whichever kind of run it
is (in-process, remote workers, ``rlgear serve``'s external clients).

Written with Minari's own storage (``MinariStorage.new`` + ``update_episodes``, as
``minari.create_dataset_from_buffers`` does), into a temporary folder beside the destination
(``.<name>.partial-<pid>``), and moved into place by :meth:`DatasetRecorder.close`, which the
Trainer's ``stop()`` calls however the run ends (stop reached, Ctrl-C, an error). So the
destination never holds half a dataset: it holds the episodes finished before the end, or nothing
(a process killed outright leaves only the ``.partial`` folder). Observations are stored losslessly
(``jpeg_encoding=False``). The behaviour policy's log-probabilities go to each episode's
``infos["action_logp"]``, where Minari keeps per-step extras.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from rlgear.errors import DatasetError
from rlgear.offline.gym_spaces import to_gym
from rlgear.offline.location import DatasetLocation, locate
from rlgear.spaces import Space

#: The ``infos`` key of the behaviour policy's action log-probabilities, per step.
ACTION_LOGP_INFO = "action_logp"


def check_output(config: Any) -> DatasetLocation:
    """Where ``offline.output`` goes; refuses one that exists (unless ``offline.output_overwrite``)."""
    location = locate(config.offline.output, "offline.output")
    if location.folder.exists() and not config.offline.output_overwrite:
        raise config.fail(
            "offline.output",
            f"a dataset exists at {location.folder}; set offline.output_overwrite: true to replace it, or "
            "name another",
        )
    return location


class DatasetRecorder:
    """Appends episodes (dicts as ``EpisodeRecorder.pop`` gives them) to a new Minari dataset.

    Args:
        config: the run config (``offline.*``, ``algorithm``, ``env``).
        observation_space, action_space: the env's raw spaces (what the episodes hold).
    """

    def __init__(self, config: Any, observation_space: Space, action_space: Space):
        from minari.dataset.minari_storage import MinariStorage

        self.location = check_output(config)
        self.offline = config.offline
        self.folder = self.location.folder
        self.partial = self.folder.parent / f".{self.folder.name}.partial-{os.getpid()}"
        if self.partial.exists():
            shutil.rmtree(self.partial)
        self.partial.mkdir(parents=True)
        self._pending: list[Any] = []
        self.episodes_written = 0
        self.steps_written = 0
        self.has_action_logp: bool | None = None
        self.closed = False
        self.storage = MinariStorage.new(
            self.partial / "data",
            observation_space=to_gym(observation_space),
            action_space=to_gym(action_space),
            env_spec=_env_spec(config),
            data_format="hdf5",
            jpeg_encoding=False,
        )
        metadata: dict[str, Any] = {
            "dataset_id": self.location.name,
            "algorithm_name": str(config.algorithm),
            "minari_version": _minari_version(),
            "rlgear_env": str(config.env.name),
        }
        if self.offline.output_author:
            metadata["author"] = {self.offline.output_author}
        if self.offline.output_description:
            metadata["description"] = self.offline.output_description
        self.storage.update_metadata(metadata)

    def add(self, episodes: list[dict[str, Any]]) -> None:
        """Queue finished episodes; written every ``offline.output_flush_episodes``."""
        if self.closed:
            return
        from minari.data_collector import EpisodeBuffer

        for episode in episodes:
            logp = episode.get("action_logp")
            if self.has_action_logp is None:
                self.has_action_logp = logp is not None
            infos = {ACTION_LOGP_INFO: logp} if logp is not None and self.has_action_logp else None
            self._pending.append(
                EpisodeBuffer(
                    observations=episode["observations"],
                    actions=episode["actions"],
                    rewards=episode["rewards"],
                    terminations=episode["terminations"],
                    truncations=episode["truncations"],
                    infos=infos,
                )
            )
        if len(self._pending) >= self.offline.output_flush_episodes:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        self.storage.update_episodes(pending)
        self.episodes_written += len(pending)
        self.steps_written += sum(len(e.rewards) for e in pending)

    def close(self) -> Path | None:
        """Write what is queued and move the dataset into place; the destination, or None when no
        episode finished (then nothing is left on disk)."""
        if self.closed:
            return None
        self.closed = True
        try:
            self.flush()
            if self.episodes_written == 0:
                shutil.rmtree(self.partial, ignore_errors=True)
                return None
            self.storage.update_metadata({"rlgear_action_logp": bool(self.has_action_logp)})
            if self.location.dataset_id is not None:
                _ensure_namespace(self.location.dataset_id)
            if self.folder.exists():  # offline.output_overwrite (checked at the start)
                shutil.rmtree(self.folder)
            self.folder.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.partial, self.folder)
        except OSError as err:
            raise DatasetError(f"offline.output: could not write the dataset {self.folder}: {err}") from err
        return self.folder

    def abort(self) -> None:
        """Drop everything (the run never started)."""
        self.closed = True
        shutil.rmtree(self.partial, ignore_errors=True)


def _minari_version() -> str:
    import minari

    return str(minari.__version__)


def _env_spec(config: Any) -> Any:
    """The gymnasium EnvSpec of a plain registered gymnasium env (so ``recover_environment`` works),
    else None (kwargs, wrappers or another adapter change what the id alone would build)."""
    if config.env.adapter != "gymnasium" or config.env.kwargs or config.env.wrappers:
        return None
    try:
        import gymnasium as gym

        return gym.spec(config.env.name)
    except Exception:  # not registered by id (a module:Class env): no spec
        return None


def _ensure_namespace(dataset_id: str) -> None:
    """Minari's namespace metadata for ``ns/name-vN`` (``create_dataset_from_buffers`` makes it too)."""
    if "/" not in dataset_id:
        return
    from minari.namespace import create_namespace, list_local_namespaces

    namespace = dataset_id.rsplit("/", 1)[0]
    if namespace not in list_local_namespaces():
        create_namespace(namespace)
