"""The writer of ``offline.output``: a run's finished episodes as a Minari dataset.

The rollout workers assemble whole raw episodes
(:class:`~rlgear.sampling.episode_recorder.EpisodeRecorder`) and hand them to the driver with the
episode metrics; the Trainer gives them to one :class:`DatasetRecorder`, whichever kind of run it
is (in-process, remote workers, ``rlgear serve``'s external clients).

Written with Minari's own storage (``MinariStorage.new`` + ``update_episodes``, as
``minari.create_dataset_from_buffers`` does), by a writer process, into a temporary folder beside
the destination (``.<name>.partial-<pid>``), and moved into place by :meth:`DatasetRecorder.close`,
which the Trainer's ``stop()`` calls however the run ends (stop reached, Ctrl-C, an error). So the
destination never holds half a dataset: it holds the episodes finished before the end, or nothing
(a process killed outright leaves only the ``.partial`` folder). Observations are stored losslessly
(``jpeg_encoding=False``). The behaviour policy's log-probabilities go to each episode's
``infos["action_logp"]``, where Minari keeps per-step extras.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from rlgear.errors import DatasetError
from rlgear.offline.gym_spaces import to_gym
from rlgear.offline.location import DATA_FOLDER, DatasetLocation, locate
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

    The HDF5 writes (Minari stores each episode as a group of datasets: milliseconds per episode,
    several times the cost of sampling it) run in a child process fed through a queue, so they
    never stall sampling; the child ignores Ctrl-C and writes until :meth:`close` says the run is
    over, then the dataset is moved into place here.

    Args:
        config: the run config (``offline.*``, ``algorithm``, ``env``).
        observation_space, action_space: the env's raw spaces (what the episodes hold).
    """

    def __init__(self, config: Any, observation_space: Space, action_space: Space):
        import multiprocessing

        from minari.dataset.minari_storage import MinariStorage

        self.location = check_output(config)
        self.offline = config.offline
        self.folder = self.location.folder
        self.partial = self.folder.parent / f".{self.folder.name}.partial-{os.getpid()}"
        if self.partial.exists():
            shutil.rmtree(self.partial)
        self.partial.mkdir(parents=True)
        try:
            self.episodes_written = 0
            self.steps_written = 0
            self.has_action_logp: bool | None = None
            self.closed = False
            storage = MinariStorage.new(  # metadata.json now (a bad space fails here, at setup)
                self.partial / DATA_FOLDER,
                observation_space=to_gym(observation_space),
                action_space=to_gym(action_space),
                env_spec=_env_spec(config),
                data_format="hdf5",
                jpeg_encoding=False,  # lossless: what is read back is what the env gave
            )
            metadata: dict[str, Any] = {
                "dataset_id": self.location.name,
                "algorithm_name": str(config.algorithm),
                "minari_version": _minari_version(),
                "rlgear_env": str(config.env.name),
                **_env_record(config),
            }
            if self.offline.output_author:
                metadata["author"] = {self.offline.output_author}
            if self.offline.output_description:
                metadata["description"] = self.offline.output_description
            storage.update_metadata(metadata)
            # fork: no re-import of the user's __main__ (spawn would run an unguarded script again);
            # the child touches no lock of the parent's threads (only its own queue, minari and h5py)
            context = multiprocessing.get_context("fork")
            self._queue = context.Queue()
            self._results = context.Queue()
            self._process = context.Process(
                target=_write_loop,
                args=(
                    self._queue,
                    self._results,
                    self.partial / DATA_FOLDER,
                    self.offline.output_flush_episodes,
                    os.getpid(),
                ),
                name="rlgear-dataset-writer",
                daemon=True,
            )
            self._process.start()
        except BaseException:  # a bad space, a missing module: leave nothing half-written
            shutil.rmtree(self.partial, ignore_errors=True)
            raise

    def add(self, packed: dict[str, Any]) -> None:
        """Hand finished episodes (packed, as ``EpisodeRecorder.pop`` gives them) to the writer;
        returns at once."""
        if self.closed:
            return
        if self._process.exitcode is not None:  # the writer failed (disk full ...): say so now
            self.close()
        lengths = packed["lengths"]
        self.episodes_written += len(lengths)
        self.steps_written += int(lengths.sum())
        if self.has_action_logp is None:
            self.has_action_logp = "action_logp" in packed
        self._queue.put(packed)

    def close(self) -> Path | None:
        """Wait for the writer, and move the dataset into place; the destination, or None when no
        episode finished (then nothing is left on disk)."""
        if self.closed:
            return None
        self.closed = True
        if self._process.exitcode is None:
            self._queue.put(None)
        self._process.join()
        try:
            status, detail = self._results.get(timeout=5)
        except Exception:
            status, detail = "error", f"the writer process ended with exit code {self._process.exitcode}"
        if status != "ok":
            raise DatasetError(
                f"offline.output: the dataset could not be written ({detail}); what was written is in {self.partial}"
            )
        if self.episodes_written == 0:
            shutil.rmtree(self.partial, ignore_errors=True)
            logging.getLogger(__name__).warning("offline.output: no episode finished; no dataset written")
            return None
        try:
            if self.location.dataset_id is not None:
                _ensure_namespace(self.location.dataset_id)
            if self.folder.exists():  # offline.output_overwrite (checked at the start)
                shutil.rmtree(self.folder)
            self.folder.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.partial, self.folder)
        except OSError as err:
            raise DatasetError(
                f"offline.output: could not move the dataset into {self.folder}: {err}"
            ) from err
        return self.folder


def _write_loop(queue: Any, results: Any, data_path: Path, flush_episodes: int, parent: int) -> None:
    """The writer process: append what arrives to the storage, in batches; ``None`` ends it."""
    import queue as queue_mod
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it closes the dataset
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        from minari.data_collector import EpisodeBuffer
        from minari.dataset.minari_storage import MinariStorage

        from rlgear.sampling.episode_recorder import unpack_episodes

        storage = MinariStorage.read(data_path)
        pending: list[Any] = []
        logp_seen = False
        while True:
            try:
                episodes = queue.get(timeout=2.0)
            except queue_mod.Empty:
                if os.getppid() != parent:  # the run died without closing: leave the .partial folder
                    return
                episodes = {}
            if episodes is None:
                break
            for episode in unpack_episodes(episodes) if episodes else ():
                logp = episode.get("action_logp")
                logp_seen |= logp is not None
                pending.append(
                    EpisodeBuffer(
                        observations=episode["observations"],
                        actions=episode["actions"],
                        rewards=episode["rewards"],
                        terminations=episode["terminations"],
                        truncations=episode["truncations"],
                        infos=None if logp is None else {ACTION_LOGP_INFO: logp},
                    )
                )
            if len(pending) >= flush_episodes:
                storage.update_episodes(pending)
                pending = []
        if pending:
            storage.update_episodes(pending)
        storage.update_metadata({"rlgear_action_logp": logp_seen})
        results.put(("ok", ""))
    except BaseException as err:  # one line for the parent's error
        results.put(("error", f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"))


def _minari_version() -> str:
    import minari

    return str(minari.__version__)


def _env_record(config: Any) -> dict[str, Any]:
    """``rlgear_env_adapter`` and ``rlgear_env_kwargs``: with ``rlgear_env``, what ``rlgear
    evaluate`` builds for a run trained from this dataset without an env section (wrappers are not
    kept; kwargs that JSON cannot hold are left out, and then the kwargs key altogether)."""
    record: dict[str, Any] = {"rlgear_env_adapter": str(config.env.adapter)}
    if config.env.kwargs:
        with contextlib.suppress(TypeError, ValueError):
            record["rlgear_env_kwargs"] = json.loads(json.dumps(dict(config.env.kwargs)))
    return record


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
