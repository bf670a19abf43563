"""Loading a trained policy from a checkpoint, for acting and evaluation."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.backend import backend_class_for
from rlgear.config import RunConfig
from rlgear.discovery import registry
from rlgear.env import VideoRequest
from rlgear.errors import CheckpointError, RLGearError
from rlgear.preprocessing import ObservationPreprocessor, batch_size
from rlgear.run import checkpoint as ckpt
from rlgear.spaces import (
    Dict,
    Discrete,
    MultiDiscrete,
    Tuple,
    flat_action_dim,
    space_from_json,
    unflatten_action,
)
from rlgear.timestep import StepType, TimeStep


def checkpoint_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> tuple[Any, RunConfig]:
    """``(checkpoint folder, its RunConfig with overrides applied)``."""
    folder = ckpt.resolve_path(path)
    _, _, raw, _ = ckpt.read(folder)
    return folder, config_mod.resolve(raw, source=str(folder / ckpt.CONFIG_FILE), overrides=overrides)


def load_weights(path: str | os.PathLike, policy_id: str | None = None) -> dict[str, np.ndarray]:
    """One policy's weights (``policy_id``; may be left out when the checkpoint holds one policy)."""
    folder = ckpt.resolve_path(path)
    arrays, state, _, _ = ckpt.read(folder)
    return ckpt.policy_weights(arrays, _policy_id(folder, arrays, state, policy_id))


def _policy_id(folder: Path, arrays: dict[str, Any], state: dict[str, Any], policy_id: str | None) -> str:
    ids = ckpt.checkpoint_policy_ids(arrays, state)
    if policy_id is None:
        if len(ids) > 1:
            raise CheckpointError(
                f"{folder}: the checkpoint holds {len(ids)} policies ({', '.join(ids)}); say which one "
                "(rlgear.load(path, policy_id=...))"
            )
        return ids[0]
    if policy_id not in ids:
        raise CheckpointError(
            f"{folder}: no policy '{policy_id}' in the checkpoint (it holds {', '.join(ids)})"
        )
    return policy_id


def load_env_state(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The env statistics a checkpoint holds (``env.wrappers_vector``'s running mean and variance ...)."""
    arrays, _, _, _ = ckpt.read(ckpt.resolve_path(path))
    return {k.removeprefix("env/"): v for k, v in arrays.items() if k.startswith("env/")}


def load_obs_filter_state(path: str | os.PathLike, policy_id: str | None = None) -> dict[str, np.ndarray]:
    """The global observation-filter statistics a checkpoint holds (empty without ``model.observation_filter``):
    of its one policy, or of ``policy_id`` in a checkpoint of several policies (each has its own)."""
    arrays, state, _, _ = ckpt.read(ckpt.resolve_path(path))
    ids = ckpt.checkpoint_policy_ids(arrays, state)
    several = len(ids) > 1
    return ckpt.obs_filter_arrays(arrays, policy_id if several and policy_id is not None else ids[0], several)


def frozen_obs_filter(
    folder: Path, model_config: Any, observation_space: Any, policy_id: str | None = None
) -> Any:
    """The checkpoint's observation filter (of ``policy_id`` with several policies), frozen
    (evaluation does not update it), or None when off."""
    from rlgear.sampling.observation_filter import make_observation_filter

    obs_filter = make_observation_filter(model_config, observation_space)
    if obs_filter is None:
        return None
    state = load_obs_filter_state(folder, policy_id)
    if not state:
        which = f"policy '{policy_id}': " if policy_id is not None else ""
        raise CheckpointError(
            f"{folder}: {which}the checkpoint holds no observation filter statistics, but "
            "model.observation_filter is mean_std"
        )
    try:
        obs_filter.set_state(state, str(folder))
    except ValueError as err:
        raise CheckpointError(str(err)) from err
    obs_filter.frozen = True
    return obs_filter


@dataclasses.dataclass
class Evaluation:
    """What :func:`evaluate_checkpoint` ran: the checkpoint, episode summaries, videos written."""

    checkpoint: Path
    episodes: list[dict[str, Any]]
    videos: list[Path]
    #: One line saying which env was used when the checkpoint's run had no env section, else None.
    env_note: str | None = None


def evaluate_checkpoint(
    path: str | os.PathLike,
    episodes: int,
    overrides: Sequence[str] = (),
    explore: bool = False,
    video_dir: str | os.PathLike | None = None,
) -> Evaluation:
    """Run a checkpoint's policy for ``episodes`` fresh episodes (``rlgear evaluate``).

    The envs are built as in training, ``env.wrappers_vector`` statistics restored from the
    checkpoint and frozen. With ``video_dir`` each episode is recorded as an mp4 there (one
    env, stepped in this process; needs the ``video`` extra and an env rendering rgb_array).
    """
    if episodes <= 0:
        raise RLGearError(f"--episodes: expected a positive number, got {episodes}")
    folder, config = checkpoint_config(path, overrides)
    env_note = None
    if not config.has_env:  # an offline run without env: the env its dataset was recorded in
        config, env_note = _dataset_env_config(folder, config, overrides)
    trainer_cls = registry.load_algorithm(config.algorithm)
    policy_cls = trainer_cls.policy_class(config.backend)
    adapter = registry.load_env_adapter(config.env.adapter)
    video = None
    if video_dir is not None:
        from rlgear.run.video import require_video_extra

        require_video_extra("--video")
        if not adapter.records_video:
            raise RLGearError(
                f"--video: env adapter '{config.env.adapter}' cannot record videos (the gymnasium adapter can)"
            )
        video = VideoRequest(folder=str(Path(video_dir).resolve()), name_prefix="evaluation")
        # one env in this process: every episode is env 0's, the one that records
        config = dataclasses.replace(
            config,
            env=dataclasses.replace(config.env, vectorization="sync"),
            workers=dataclasses.replace(config.workers, num_envs_per_worker=1),
        )
    backend = backend_class_for(policy_cls, config.backend)()
    backend.setup(config.workers.num_cpus_for_driver, config.seed)
    from rlgear.sampling.rollout_worker import EVALUATION_WORKER_INDEX, RolloutWorker

    # a league's players are evaluated as its trainer does: every game against league.baseline
    index = {"worker_index": EVALUATION_WORKER_INDEX} if config.league is not None else {}
    evaluator = RolloutWorker(config, policy_cls, adapter, video=video, **index)
    try:
        try:
            if len(evaluator.collectors) > 1:
                evaluator.set_weights({pid: load_weights(folder, pid) for pid in evaluator.collectors})
            else:
                evaluator.set_weights(load_weights(folder, next(iter(evaluator.collectors))))
        except ValueError as err:
            raise RLGearError(f"{folder}: the checkpoint does not fit the config: {err}") from err
        try:
            evaluator.env.set_state(load_env_state(folder))
        except CheckpointError as err:
            raise CheckpointError(f"{folder}: {err}") from err
        evaluator.env.freeze_statistics()
        for pid, collector in evaluator.collectors.items():  # the training run's statistics, frozen
            # (evaluate() resets the envs first, so every observation it acts on goes through these)
            if collector.obs_filter is not None:
                collector.obs_filter = frozen_obs_filter(
                    folder, collector.config.model, collector.preprocessor.observation_space, pid
                )
        if video is not None:
            video.arm(episodes)  # after the evaluator's first reset: only the episodes evaluated record
        finished = evaluator.evaluate(episodes, explore=explore)
    finally:
        evaluator.stop()  # closing the env writes a clip whose episode did not end
    videos = [video.path(i) for i in video.started if video.path(i).exists()] if video is not None else []
    return Evaluation(folder, finished, videos, env_note)


def _dataset_env_config(folder: Path, config: RunConfig, overrides: Sequence[str]) -> tuple[RunConfig, str]:
    """``config`` with the env its dataset was recorded in (the checkpoint's ``dataset_env``, or
    ``dataset_env_id``), and a line saying so; an error naming ``env.name`` when it has none."""
    import json

    _, _, raw, metadata = ckpt.read(folder)
    recorded = metadata.get("dataset_env")
    if not isinstance(recorded, dict) or not recorded.get("name"):
        name = metadata.get("dataset_env_id")
        recorded = {"name": name, "adapter": "gymnasium", "kwargs": {}} if name else None
    if recorded is None:
        raise RLGearError(
            f"env.name: {folder} is a checkpoint of a run without an env section, and its dataset "
            "names no env it was recorded in: evaluate with --set env.name=<gymnasium id or module:Class>"
        )
    dataset_env = [
        f"env.name={json.dumps(recorded['name'])}",
        f"env.adapter={json.dumps(recorded.get('adapter') or 'gymnasium')}",
        f"env.kwargs={json.dumps(recorded.get('kwargs') or {})}",
    ]
    resolved = config_mod.resolve(
        raw, source=str(folder / ckpt.CONFIG_FILE), overrides=[*dataset_env, *overrides]
    )
    kwargs = f" with kwargs {recorded['kwargs']}" if recorded.get("kwargs") else ""
    note = (
        f"env: the run had no env section; evaluating in '{recorded['name']}'{kwargs}, the env its "
        "dataset was recorded in (--set env.name=... for another)"
    )
    return resolved, note


class LoadedPolicy:
    """A trained policy outside a trainer: ``compute_single_action(obs)``.

    A recurrent policy (``model.lstm``) carries its state between calls: pass
    ``episode_start=True`` with an episode's first observation (the state goes
    back to zeros, as the evaluator does at FIRST), then one call per step of
    that episode. The previous action fed to the LSTM (``lstm_use_prev_action``)
    is the one this object returned last; give ``prev_reward`` when the model
    uses it (``lstm_use_prev_reward``).

    Observations are the env's own (a dict for a Dict space ...): they are preprocessed and
    their ``action_mask`` honoured as in training (:mod:`rlgear.preprocessing`), and Tuple/Dict
    actions come back structured, as the env takes them.
    """

    def __init__(
        self,
        policy: Any,
        config: RunConfig,
        env_state: dict[str, np.ndarray] | None = None,
        preprocessor: ObservationPreprocessor | None = None,
        obs_filter: Any = None,
    ):
        self.policy = policy
        self.config = config
        #: The checkpoint's observation filter (``model.observation_filter``), frozen, or None:
        #: :meth:`compute_actions` applies it to the raw observations it is given.
        self.obs_filter = obs_filter
        #: The checkpoint's env statistics (``env.wrappers_vector``: e.g.
        #: ``wrappers_vector/0/obs_rms/mean``); observations given to this policy must be
        #: transformed as those wrappers did in training.
        self.env_state = dict(env_state or {})
        self.preprocessor = preprocessor or ObservationPreprocessor(
            policy.observation_space, policy.action_space, config.env.name
        )
        #: The env's observation space (what :meth:`compute_actions` takes).
        self.observation_space = self.preprocessor.raw_space
        self.action_space = policy.action_space
        self._action_dtype = np.int64 if isinstance(self.action_space, Discrete) else np.float32
        #: The recurrent state per row of the last batch (empty for feed-forward policies).
        self.state: list[np.ndarray] = []
        self._prev_actions: np.ndarray | None = None

    def compute_actions(
        self,
        observations: Any,
        explore: bool = False,
        episode_start: np.ndarray | bool = False,
        prev_rewards: np.ndarray | None = None,
    ) -> Any:
        """Actions for a batch of observations ``[B, *obs_shape]`` (a dict/tuple of batched arrays
        for Dict/Tuple spaces).

        ``episode_start`` (``[B]`` bools, or one bool for all rows) marks rows whose
        episode begins with this observation: their recurrent state and previous action
        are reset. The first call, and a batch of another size than the last one, start every
        row afresh.
        """
        prep = self.preprocessor
        if not isinstance(observations, dict | tuple):
            observations = np.asarray(observations)
        n = batch_size(observations)
        space = self.action_space
        start = np.broadcast_to(np.asarray(episode_start, bool), (n,))
        if self.policy.recurrent and (not self.state or self.state[0].shape[0] != n):
            self.state, self._prev_actions, start = self.policy.get_initial_state(n), None, np.ones(n, bool)
        elif not self.policy.recurrent:
            start = np.ones(n, bool)
        action_dtype = np.int64 if isinstance(space, Discrete | MultiDiscrete) else np.float32
        action_shape = (flat_action_dim(space),) if isinstance(space, Tuple | Dict) else space.shape
        if self._prev_actions is None or self._prev_actions.shape[0] != n:
            self._prev_actions = np.zeros((n, *action_shape), dtype=action_dtype)
        for array in (*self.state, self._prev_actions):
            array[start] = 0
        step_type = np.where(start, StepType.FIRST, StepType.MID).astype(np.int32)
        mask = prep.action_mask(observations)
        if mask is not None:
            blocks = space.nvec if isinstance(space, MultiDiscrete) else (space.n,)
            mask = prep.checked_mask(mask, step_type, blocks)
        observations = prep.transform(observations)
        if self.obs_filter is not None:
            observations = self.obs_filter.apply(observations)
        timestep = TimeStep(
            step_type=step_type,
            reward=np.zeros(n, np.float32) if prev_rewards is None else np.asarray(prev_rewards, np.float32),
            discount=np.ones(n, dtype=np.float32),
            observation=observations,
            prev_action=self._prev_actions,
            env_id=np.arange(n, dtype=np.int32),
            action_mask=mask,
        )
        actions, state, _ = self.policy.compute_actions(timestep, self.state or None, explore=explore)
        if self.policy.recurrent:
            self.state = [np.array(s, dtype=np.float32) for s in state]
            self._prev_actions = np.array(actions, dtype=self._prev_actions.dtype).reshape(
                self._prev_actions.shape
            )
        return unflatten_action(space, actions)

    def compute_single_action(
        self, observation: Any, explore: bool = False, episode_start: bool = False, prev_reward: float = 0.0
    ) -> Any:
        """The action for one observation (greedy unless ``explore``); see the class for recurrent state."""
        actions = self.compute_actions(
            _with_batch_axis(observation), explore=explore, episode_start=episode_start,
            prev_rewards=np.array([prev_reward], np.float32),
        )  # fmt: skip
        if isinstance(self.action_space, Discrete):
            return int(actions[0])
        if isinstance(actions, dict):
            return {key: value[0] for key, value in actions.items()}
        if isinstance(actions, tuple):
            return tuple(value[0] for value in actions)
        return actions[0]


def _with_batch_axis(observation: Any) -> Any:
    if isinstance(observation, dict):
        return {key: _with_batch_axis(value) for key, value in observation.items()}
    if isinstance(observation, tuple):
        return tuple(_with_batch_axis(value) for value in observation)
    return np.asarray(observation)[None]


@dataclasses.dataclass
class CheckpointPolicy:
    """One policy of a checkpoint, read and resolved, before any network is built: what
    :func:`load` and the framework-free :func:`rlgear.inference.load` share."""

    folder: Path
    #: The policy's own config (a multi-agent run's per-policy ``training``/``model`` applied).
    config: RunConfig
    policy_id: str
    weights: dict[str, np.ndarray]
    #: The policy's checkpoint meta (``global_timestep`` ...).
    meta: dict[str, Any]
    #: The checkpoint's metadata, this policy's spaces in it (``backend``, ``observation_space`` ...).
    metadata: dict[str, Any]
    #: Turns the env's observations (the checkpoint keeps the env's spaces) into the policy's.
    preprocessor: ObservationPreprocessor
    action_space: Any


def read_policy(
    path: str | os.PathLike, overrides: Sequence[str] = (), policy_id: str | None = None
) -> CheckpointPolicy:
    """Read policy ``policy_id`` (may be left out when the checkpoint holds one) of a checkpoint."""
    folder, config = checkpoint_config(path, overrides)
    arrays, state, _, metadata = ckpt.read(folder)
    policy_id = _policy_id(folder, arrays, state, policy_id)
    from rlgear.config import multiagent

    config = multiagent.policy_config(config, policy_id)
    spaces = (metadata.get("policy_spaces") or {}).get(policy_id)
    if spaces is not None:
        metadata = {**metadata, **spaces}
    action_space = space_from_json(metadata["action_space"])
    # The checkpoint keeps the env's spaces; the policy was built with the preprocessed one.
    preprocessor = ObservationPreprocessor(
        space_from_json(metadata["observation_space"]), action_space, config.env.name
    )
    meta = (state.get("policy_metas") or {}).get(policy_id, state.get("policy_meta", {}))
    return CheckpointPolicy(
        folder, config, policy_id, ckpt.policy_weights(arrays, policy_id), dict(meta or {}), metadata,
        preprocessor, action_space,
    )  # fmt: skip


def loaded_policy(policy: Any, read: CheckpointPolicy) -> LoadedPolicy:
    """``policy`` (holding ``read``'s weights) as a :class:`LoadedPolicy`, with the checkpoint's
    observation filter (frozen) and env statistics."""
    obs_filter = frozen_obs_filter(read.folder, read.config.model, policy.observation_space, read.policy_id)
    return LoadedPolicy(policy, read.config, load_env_state(read.folder), read.preprocessor, obs_filter)


def load(
    path: str | os.PathLike, overrides: Sequence[str] = (), policy_id: str | None = None
) -> LoadedPolicy:
    """Rebuild the policy of a checkpoint (or of a run folder's newest checkpoint).

    No environment is created: the spaces come from the checkpoint. Overrides
    such as ``backend=tf`` load the framework-neutral weights into another backend.
    A checkpoint of a run with several policies (``multiagent``) needs ``policy_id``.
    """
    read = read_policy(path, overrides, policy_id)
    config = read.config
    trainer_cls = registry.load_algorithm(config.algorithm)
    policy_cls = trainer_cls.policy_class(config.backend)
    backend = backend_class_for(policy_cls, config.backend)()
    backend.setup(config.workers.num_cpus_for_driver, config.seed)
    policy = policy_cls(read.preprocessor.observation_space, read.action_space, config)
    try:
        policy.set_weights(read.weights)
    except ValueError as err:
        raise CheckpointError(f"{read.folder}: the checkpoint does not fit the config: {err}") from err
    return loaded_policy(policy, read)
