"""Reading ``offline.input``: one or several Minari datasets as one stream of episodes.

Episodes are read from disk a few at a time (Minari's ``get_episodes`` on the storage, never the
whole dataset), so a dataset larger than memory streams; with several learners each reads its own
shard (every n-th episode). What Minari stores is what comes out: raw observations (a dict/tuple of
arrays for Dict/Tuple spaces), the env's actions, terminations and truncations apart, and the
behaviour policy's ``action_logp`` when the dataset has it (``infos["action_logp"]``, as
:mod:`rlgear.offline.recorder` writes it). :meth:`OfflineData.transitions` turns the episodes into
random minibatches of single-step transitions (:mod:`rlgear.offline.transitions`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlgear.errors import ConfigError, DatasetError
from rlgear.offline.gym_spaces import describe, from_gym, same_space
from rlgear.offline.location import DATA_FOLDER, METADATA_FILE, DatasetLocation, datasets_root, locate
from rlgear.offline.recorder import ACTION_LOGP_INFO
from rlgear.spaces import Space

#: Episodes read from the file per call (one open of the HDF5 file per chunk).
READ_CHUNK = 16


@dataclass
class Episode:
    """One episode of ``T`` steps, as the env gave it.

    ``observations`` has ``T+1`` rows (the last is the final observation, after the last action),
    ``actions``, ``rewards`` (float32), ``terminations`` and ``truncations`` (bool) ``T`` rows;
    ``action_logp`` (float32 ``[T]``) is the behaviour policy's log-probability of each action, or
    None when the dataset has none. ``id`` is the episode's id within dataset ``dataset``
    (an index into :attr:`OfflineData.names`).
    """

    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    action_logp: np.ndarray | None
    id: int
    dataset: int = 0

    def __len__(self) -> int:
        return len(self.rewards)


class _OneDataset:
    """One Minari storage, opened for reading; errors name ``source`` and the dataset."""

    def __init__(self, location: DatasetLocation, source: str):
        from minari.dataset.minari_storage import MinariStorage

        self.location = location
        self.source = source
        self.data_path = _data_path(location, source)
        try:
            self.storage = MinariStorage.read(self.data_path)
            self.observation_space = from_gym(self.storage.observation_space, self.where)
            self.action_space = from_gym(self.storage.action_space, self.where)
            metadata = MinariStorage.read_raw_metadata(self.data_path)
            self.total_episodes = int(metadata.get("total_episodes", self.storage.total_episodes))
            self.total_steps = int(metadata.get("total_steps", self.storage.total_steps))
        except DatasetError:
            raise
        except Exception as err:
            raise DatasetError(f"{self.where}: not a readable Minari dataset ({_one_line(err)})") from err
        #: The env the dataset was recorded in, when its metadata says (:func:`recorded_env`).
        self.env = recorded_env(metadata)
        flag = metadata.get("rlgear_action_logp")
        if flag is None:  # a dataset rlgear did not write: look at its first episode
            flag = self.total_episodes > 0 and ACTION_LOGP_INFO in (self.read([0])[0].get("infos") or {})
        self.has_action_logp = bool(flag)

    @property
    def where(self) -> str:
        return f"{self.source}: dataset '{self.location.text}' ({self.data_path})"

    def read(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        try:
            return list(self.storage.get_episodes(list(indices)))
        except Exception as err:
            raise DatasetError(
                f"{self.where}: cannot read episodes {list(indices)[:3]}...: {_one_line(err)}"
            ) from err


class OfflineData:
    """Several datasets with the same spaces, read as one (see :func:`open_datasets`)."""

    def __init__(self, datasets: list[_OneDataset]):
        self._datasets = datasets
        first = datasets[0]
        for other in datasets[1:]:
            for what, a, b in (
                ("observation", first.observation_space, other.observation_space),
                ("action", first.action_space, other.action_space),
            ):
                if not same_space(a, b):
                    raise ConfigError(
                        f"{first.source}: datasets '{first.location.text}' and '{other.location.text}' have "
                        f"different {what} spaces: {describe(a)} vs {describe(b)}"
                    )
        self.source = first.source
        self.observation_space: Space = first.observation_space
        self.action_space: Space = first.action_space
        self.names: list[str] = [d.location.text for d in datasets]
        self.total_episodes = sum(d.total_episodes for d in datasets)
        self.total_steps = sum(d.total_steps for d in datasets)
        #: Whether every dataset has the behaviour policy's log-probabilities.
        self.has_action_logp = all(d.has_action_logp for d in datasets)
        #: The env the (first) dataset was recorded in, or None when no metadata names one.
        self.env: RecordedEnv | None = next((d.env for d in datasets if d.env is not None), None)
        #: Its env id (``env.name``), or None.
        self.env_id: str | None = None if self.env is None else self.env.name
        #: (dataset index, episode index) of every episode, in dataset order.
        self._index = np.array(
            [(k, j) for k, d in enumerate(datasets) for j in range(d.total_episodes)], dtype=np.int64
        ).reshape(-1, 2)

    def reopen(self) -> Callable[[], OfflineData]:
        """A picklable way to open these datasets again in another process (a learner actor that
        reads its own shard): by their absolute folders, so neither the process's working
        directory nor its ``MINARI_DATASETS_PATH`` matters."""
        return functools.partial(
            open_datasets, [str(Path(d.data_path).resolve()) for d in self._datasets], self.source
        )

    def check_env_spaces(self, observation_space: Space, action_space: Space, env_name: str) -> None:
        """Refuse a dataset recorded in another env (spaces differ): one line naming both."""
        for what, ours, env in (
            ("observation", self.observation_space, observation_space),
            ("action", self.action_space, action_space),
        ):
            if not same_space(ours, env):
                raise ConfigError(
                    f"{self.source}: the {what} space of dataset '{self.names[0]}' is {describe(ours)}, "
                    f"env '{env_name}' has {describe(env)}"
                )

    def shard_indices(self, shard: int = 0, num_shards: int = 1) -> np.ndarray:
        """Rows of ``_index`` in shard ``shard`` of ``num_shards``: every ``num_shards``-th episode."""
        if num_shards < 1 or not 0 <= shard < num_shards:
            raise ValueError(f"shard {shard} of {num_shards}: expected 0 <= shard < num_shards")
        return np.arange(shard, len(self._index), num_shards)

    def episodes(
        self, shard: int = 0, num_shards: int = 1, rng: np.random.Generator | None = None
    ) -> Iterator[Episode]:
        """One pass over the shard's episodes, streamed from disk (a shuffled order with ``rng``)."""
        order = self.shard_indices(shard, num_shards)
        if rng is not None:
            order = rng.permutation(order)
        for start in range(0, len(order), READ_CHUNK):
            chunk = self._index[order[start : start + READ_CHUNK]]
            by_dataset: dict[int, list[int]] = {}
            for k, j in chunk.tolist():
                by_dataset.setdefault(k, []).append(j)
            read = {k: dict(zip(js, self._datasets[k].read(js), strict=True)) for k, js in by_dataset.items()}
            for k, j in chunk.tolist():
                yield self._episode(read[k][j], k, j)

    def transitions(
        self,
        batch_size: int,
        rng: np.random.Generator,
        shard: int = 0,
        num_shards: int = 1,
        buffer_episodes: int = 1000,
        obs_transform: Any = None,
        action_mask: Any = None,
    ) -> Any:
        """Endless random minibatches of transitions (a :class:`~rlgear.offline.transitions.TransitionStream`:
        iterate it; its ``epochs_completed`` counts passes over the shard)."""
        from rlgear.offline.transitions import TransitionStream

        return TransitionStream(
            self, batch_size, rng, shard, num_shards, buffer_episodes, obs_transform, action_mask
        )

    def _episode(self, data: dict[str, Any], dataset: int, index: int) -> Episode:
        infos = data.get("infos") or {}
        logp = infos.get(ACTION_LOGP_INFO) if self.has_action_logp else None
        return Episode(
            observations=data["observations"],
            actions=data["actions"],
            rewards=np.asarray(data["rewards"], dtype=np.float32),
            terminations=np.asarray(data["terminations"], dtype=bool),
            truncations=np.asarray(data["truncations"], dtype=bool),
            action_logp=None if logp is None else np.asarray(logp, dtype=np.float32),
            id=int(data.get("id", index)),
            dataset=dataset,
        )


@dataclass(frozen=True)
class RecordedEnv:
    """An ``env`` section that rebuilds the env a dataset was recorded in (wrappers aside)."""

    name: str
    adapter: str = "gymnasium"
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: Which metadata said so: ``rlgear_env`` (rlgear's recorder) or ``env_spec`` (Minari's).
    source: str = "env_spec"


def recorded_env(metadata: Mapping[str, Any]) -> RecordedEnv | None:
    """The env a dataset's metadata names: rlgear's ``rlgear_env`` (with its adapter and kwargs, as
    the recording run had them), else Minari's ``env_spec`` (its id, with the kwargs and
    ``max_episode_steps`` that differ from the id's registration here), else None."""
    name = metadata.get("rlgear_env")
    if isinstance(name, str) and name:
        kwargs = metadata.get("rlgear_env_kwargs")
        return RecordedEnv(
            name,
            str(metadata.get("rlgear_env_adapter") or "gymnasium"),
            dict(kwargs) if isinstance(kwargs, Mapping) else {},
            "rlgear_env",
        )
    try:
        spec = json.loads(metadata.get("env_spec") or "null")
    except (TypeError, ValueError):
        return None
    if not isinstance(spec, Mapping) or not isinstance(spec.get("id"), str):
        return None
    kwargs = dict(spec.get("kwargs") or {})
    steps = spec.get("max_episode_steps")
    try:
        import gymnasium as gym

        registered = gym.spec(spec["id"])
        kwargs = {k: v for k, v in kwargs.items() if registered.kwargs.get(k, object()) != v}
        if steps == registered.max_episode_steps:
            steps = None
    except Exception:  # not registered here (a plugin's namespace not imported): keep everything
        pass
    if steps is not None:
        kwargs["max_episode_steps"] = steps
    return RecordedEnv(spec["id"], "gymnasium", kwargs, "env_spec")


def open_datasets(
    spec: str | Sequence[str],
    source: str = "offline.input",
    observation_space: Space | None = None,
    action_space: Space | None = None,
    env_name: str = "env",
) -> OfflineData:
    """The datasets ``spec`` names (an id, a path, or a list of them), opened for streaming.

    ``source`` (the config key) prefixes every error. With the env's spaces given, a dataset
    recorded with other spaces is refused. Errors: :class:`~rlgear.errors.ConfigError` for a
    missing dataset (naming where it looked) or spaces that differ (naming both),
    :class:`~rlgear.errors.DatasetError` for a file that is not a readable Minari dataset.
    """
    texts = [spec] if isinstance(spec, str) else list(spec)
    if not texts:
        raise ConfigError(f"{source}: expected a dataset id, a path or a list of them, got an empty list")
    data = OfflineData([_OneDataset(locate(text, source), source) for text in texts])
    if observation_space is not None and action_space is not None:
        data.check_env_spaces(observation_space, action_space, env_name)
    return data


def _data_path(location: DatasetLocation, source: str) -> Path:
    """The folder holding ``metadata.json``: ``<dataset>/data`` (Minari's layout) or, for a path,
    the folder itself when it is that ``data`` folder."""
    for candidate in (location.data_path, location.folder):
        if (candidate / METADATA_FILE).is_file():
            return candidate
    if location.dataset_id is not None:
        where = f"looked in {location.data_path} (MINARI_DATASETS_PATH: {datasets_root()})"
    else:
        where = f"looked in {location.folder} and {location.folder / DATA_FOLDER}"
    raise ConfigError(f"{source}: no Minari dataset '{location.text}': {where}")


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text[:300]}"
