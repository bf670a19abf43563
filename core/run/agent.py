"""Loading a trained policy from a checkpoint, for acting and evaluation."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.discovery import registry
from rlgear.errors import CheckpointError
from rlgear.run import checkpoint as ckpt
from rlgear.spaces import Discrete, space_from_json
from rlgear.timestep import StepType, TimeStep


def checkpoint_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> tuple[Any, RunConfig]:
    """``(checkpoint folder, its RunConfig with overrides applied)``."""
    folder = ckpt.resolve_path(path)
    _, _, raw, _ = ckpt.read(folder)
    return folder, config_mod.resolve(raw, source=str(folder / ckpt.CONFIG_FILE), overrides=overrides)


def load_weights(path: str | os.PathLike) -> dict[str, np.ndarray]:
    arrays, _, _, _ = ckpt.read(ckpt.resolve_path(path))
    return {
        k.removeprefix("policy/weights/"): v for k, v in arrays.items() if k.startswith("policy/weights/")
    }


class LoadedPolicy:
    """A trained policy outside a trainer: ``compute_single_action(obs)``."""

    def __init__(self, policy: Any, config: RunConfig):
        self.policy = policy
        self.config = config
        self.observation_space = policy.observation_space
        self.action_space = policy.action_space

    def compute_actions(self, observations: np.ndarray, explore: bool = False) -> np.ndarray:
        """Actions for a batch of observations ``[B, *obs_shape]``."""
        observations = np.asarray(observations)
        n = observations.shape[0]
        action_dtype = np.int64 if isinstance(self.action_space, Discrete) else np.float32
        timestep = TimeStep(
            step_type=np.full(n, StepType.MID, dtype=np.int32),
            reward=np.zeros(n, dtype=np.float32),
            discount=np.ones(n, dtype=np.float32),
            observation=observations,
            prev_action=np.zeros((n, *self.action_space.shape), dtype=action_dtype),
            env_id=np.arange(n, dtype=np.int32),
        )
        actions, _, _ = self.policy.compute_actions(timestep, explore=explore)
        return actions

    def compute_single_action(self, observation: Any, explore: bool = False) -> Any:
        """The action for one observation (greedy unless ``explore``)."""
        action = self.compute_actions(np.asarray(observation)[None], explore=explore)[0]
        return int(action) if isinstance(self.action_space, Discrete) else action


def load(path: str | os.PathLike, overrides: Sequence[str] = ()) -> LoadedPolicy:
    """Rebuild the policy of a checkpoint (or of a run folder's newest checkpoint).

    No environment is created: the spaces come from the checkpoint. Overrides
    such as ``backend=tf`` load the framework-neutral weights into another backend.
    """
    folder, config = checkpoint_config(path, overrides)
    _, _, _, metadata = ckpt.read(folder)
    trainer_cls = registry.load_algorithm(config.algorithm)
    policy_cls = trainer_cls.policy_class(config.backend)
    backend = registry.load_backend(config.backend)()
    backend.setup(config.workers.num_cpus_for_driver, config.seed)
    policy = policy_cls(
        space_from_json(metadata["observation_space"]), space_from_json(metadata["action_space"]), config
    )
    try:
        policy.set_weights(load_weights(folder))
    except ValueError as err:
        raise CheckpointError(f"{folder}: the checkpoint does not fit the config: {err}") from err
    return LoadedPolicy(policy, config)
