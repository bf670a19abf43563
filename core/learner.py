"""The Learner contract: what learns, apart from what acts.

A :class:`Learner` owns the trainable policies of a run: their weights, optimizer state, losses and
the update, and its part of a checkpoint. It is built from the config and the spaces alone, with
no env and no rollout worker (:meth:`Learner.build`), so a run can learn from data that never came
from an env, and so learning can move to another device or process without taking an env along.

Rollout workers act. Remote workers (Ray actors) act with copies of the policies they build
themselves and receive the learner's weights after each update
(:meth:`~rlgear.distributed.worker_set.WorkerSet.sync_weights`). The in-process rollout worker of
the embedded default acts through the learner's own policies, whose numpy twins (the acting
copies of the catalog models, :mod:`rlgear.blocks.inference`) refresh from the weights after each
update: a second framework model in the same process would cost memory and a weight copy per
update for nothing.

Devices (``learners.device``, docs/learners.md): the learner resolves the device of each policy
when it adds it, since ``auto`` depends on the policy's observations and model (an accelerator for
conv and LSTM models), builds the policy in the backend's :meth:`~rlgear.backend.Backend.device_scope`
and moves it there (:meth:`~rlgear.policy.Policy.to_device`). Weights and state still leave as CPU
numpy, so workers, checkpoints and other backends never see a device.

Where RLlib and Acme put it: RLlib's ``Learner`` (one per learner actor, grouped by a
``LearnerGroup``) and Acme's ``Learner`` (``step()``, ``get_variables``) play the same part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rlgear.backend import Backend, backend_class_for
from rlgear.config import multiagent
from rlgear.errors import UnsupportedError
from rlgear.exploration import COLUMN_PREFIX
from rlgear.policy import Policy, PolicyState
from rlgear.preprocessing import ObservationPreprocessor
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
from rlgear.spaces import Space

__all__ = ["Learner"]


class Learner:
    """The trainable policies of a run and their update.

    Args:
        config: the resolved :class:`~rlgear.config.RunConfig`.
        policy_class: the algorithm's policy class for the backend in use
            (``Trainer.policy_class(config.backend)``).
        device: where the policies learn: ``cpu`` (the default), ``auto``, ``cuda``, ``cuda:N`` or
            ``mps``, as ``learners.device`` (the Trainer passes that key). Checked against the
            backend's devices when a policy is added (:class:`~rlgear.errors.DeviceError` for one
            this machine lacks).
        backend: the run's :class:`~rlgear.backend.Backend`, which lists the devices and resolves
            ``auto``; by default one is made for ``policy_class`` and ``config.backend`` when a
            device other than ``cpu`` is asked for (no framework is touched for ``cpu``).

    Policies are added with :meth:`add_policy` (one per policy id, with the spaces its agents
    have), or all at once by :meth:`build`. The Trainer builds its learner that way and hands
    :meth:`add_policy` to the in-process rollout worker, which adds each policy when its env
    shows the spaces.
    """

    def __init__(self, config: Any, policy_class: type, device: str = "cpu", backend: Backend | None = None):
        self.config = config
        self.policy_class = policy_class
        #: The device asked for (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``).
        self.requested_device = device
        #: ``{policy id: device}``, the concrete device each policy learns on (``cpu``, ``cuda:0`` ...).
        self.devices: dict[str, str] = {}
        self._backend = backend
        self._available: list[str] | None = None
        self._policies: dict[str, Policy] = {}

    @classmethod
    def build(
        cls,
        config: Any,
        policy_class: type,
        spaces: Mapping[str, tuple[Space, Space]] | tuple[Space, Space],
        env_name: str = "",
        device: str = "cpu",
        backend: Backend | None = None,
    ) -> Learner:
        """A learner with one policy per entry of ``spaces`` (``{policy id: (observation space,
        action space)}``, or one ``(observation space, action space)`` pair for the single policy
        ``default``), the spaces as the env gives them, learning on ``device``. No env is made."""
        learner = cls(config, policy_class, device, backend)
        if isinstance(spaces, tuple):
            spaces = {multiagent.policy_ids(config)[0]: spaces}
        for policy_id, (observation_space, action_space) in spaces.items():
            preprocessed = ObservationPreprocessor(
                observation_space, action_space, env_name
            ).observation_space
            learner.add_policy(policy_id, preprocessed, action_space)
        return learner

    def add_policy(self, policy_id: str, observation_space: Space, action_space: Space) -> Policy:
        """Build policy ``policy_id`` for observations as the policy sees them (preprocessed:
        :attr:`rlgear.preprocessing.ObservationPreprocessor.observation_space`), with its
        ``multiagent.policies.<id>`` overrides applied, and keep it. Returns the policy."""
        if policy_id in self._policies:
            raise ValueError(f"the learner already has a policy '{policy_id}'")
        policy_config = multiagent.policy_config(self.config, policy_id)
        device = self.resolve_device(observation_space, policy_config.model)
        if device == "cpu" and self._backend is None:
            policy = self.policy_class(observation_space, action_space, policy_config)
        else:
            with self.backend.device_scope(device):
                policy = self.policy_class(observation_space, action_space, policy_config)
            # Also "cpu" where an accelerator exists: a framework that would use it by default
            # (TensorFlow) is pinned to the CPU. Where there is only the CPU, nothing to move.
            if device != "cpu" or len(self._devices_here()) > 1:
                policy.to_device(device)
        self._policies[policy_id] = policy
        self.devices[policy_id] = device
        return policy

    # --- devices ------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        """The backend that lists the devices and resolves ``auto`` (made on first use if not given)."""
        if self._backend is None:
            self._backend = backend_class_for(self.policy_class, self.config.backend)()
        return self._backend

    def _devices_here(self) -> list[str]:
        if self._available is None:
            self._available = self.backend.devices()
        return self._available

    @property
    def device(self) -> str:
        """Where the policies learn, for results: the device they share (``cpu``, ``cuda:0``), the
        policies' devices joined by ``,`` when ``auto`` put them apart, or the requested device while
        there is no policy yet."""
        placed = list(dict.fromkeys(self.devices.values()))
        return ",".join(placed) if placed else self.requested_device

    def resolve_device(self, observation_space: Space, model_config: Any) -> str:
        """The concrete device a policy with these (preprocessed) observations and ``model:`` section
        learns on: the requested device, ``auto`` resolved by the backend."""
        if self.requested_device == "cpu":  # always there: no backend, no framework asked
            return "cpu"
        return self.backend.resolve_device(self.requested_device, observation_space, model_config)

    # --- the policies -------------------------------------------------------------
    @property
    def policy_map(self) -> dict[str, Policy]:
        """``{policy id: Policy}`` (``{"default": policy}`` for a single-agent run)."""
        return self._policies

    @property
    def policy(self) -> Policy:
        """The one policy of a one-policy run."""
        if len(self._policies) != 1:
            raise UnsupportedError(
                f"this learner has {len(self._policies)} policies ({', '.join(self._policies) or 'none'}): "
                "use learner.policy_map[policy_id]"
            )
        return next(iter(self._policies.values()))

    @property
    def policies_to_train(self) -> list[str]:
        """The ids of the policies that learn (``multiagent.policies_to_train``; default all)."""
        return [pid for pid in multiagent.policies_to_train(self.config) if pid in self._policies]

    # --- learning -----------------------------------------------------------------
    def set_global_timestep(self, timestep: int) -> None:
        """Tell every policy the run's env steps, for schedules over ``timesteps_total``."""
        for policy in self._policies.values():
            policy.set_global_timestep(timestep)

    def update(self, batch: SampleBatch | MultiAgentBatch) -> dict[str, float]:
        """Learn on ``batch``; returns learner statistics.

        A :class:`~rlgear.sample_batch.SampleBatch` trains the one policy (its stats as the policy
        gives them). A :class:`~rlgear.sample_batch.MultiAgentBatch` trains each policy of
        :attr:`policies_to_train` on its own rows, stats keyed ``<policy id>/<key>``.
        """
        if not isinstance(batch, MultiAgentBatch):
            return self.policy.learn_on_batch(batch)
        stats: dict[str, float] = {}
        for policy_id in self.policies_to_train:
            rows = batch.get(policy_id)
            if rows is None or len(rows) == 0:
                continue
            for key, value in self._policies[policy_id].learn_on_batch(rows).items():
                stats[f"{policy_id}/{key}"] = value
        return stats

    def learn_exploration(self, batch: SampleBatch | MultiAgentBatch) -> tuple[Any, dict[str, float]]:
        """Train the exploration module (``exploration:``) of each policy on freshly sampled rows
        and return ``(batch without the exploration columns, stats)``, stats keyed
        ``exploration/<key>`` (``<policy id>/exploration/<key>`` with several policies).

        Why fresh rows, not replayed ones: a module such as ICM's forward model needs the one-step
        next observation of each row, which the sampling side adds (:mod:`rlgear.sampling.intrinsic`);
        and the module should see each transition once, as in the papers' PPO loops.
        """
        if not isinstance(batch, MultiAgentBatch):
            rows, stats = self._learn_exploration(self.policy, batch)
            return rows, {f"exploration/{k}": v for k, v in stats.items()}
        out, stats = {}, {}
        for policy_id, rows in batch.items():
            policy = self._policies[policy_id]
            out[policy_id], own = self._learn_exploration(policy, rows)
            stats.update({f"{policy_id}/exploration/{k}": v for k, v in own.items()})
        return MultiAgentBatch(out, batch.env_steps, batch.agent_steps), stats

    @staticmethod
    def _learn_exploration(policy: Policy, rows: SampleBatch) -> tuple[SampleBatch, dict[str, float]]:
        module = getattr(policy, "exploration_module", None)
        columns = [key for key in rows if key.startswith(COLUMN_PREFIX)]
        if module is None or not columns:
            return rows, {}
        own = SampleBatch({k: v for k, v in rows.items() if k not in columns})
        if len(rows) == 0:
            return own, {}
        stats = dict(module.learn(rows))
        raw = rows.get("exploration_rewards")
        if raw is not None:  # what every plugin reports: its raw intrinsic rewards and their scale
            stats["intrinsic_reward_mean"] = float(np.mean(raw))
            stats["intrinsic_reward_max"] = float(np.max(raw))
        stats["intrinsic_reward_scale"] = float(module.reward_scale())
        return own, stats

    # --- weights and state --------------------------------------------------------
    def get_weights(self, policy_ids: Iterable[str] | None = None) -> dict[str, Any]:
        """The weights rollout workers act with: a flat ``{name: array}`` for a one-policy run,
        else ``{policy id: {name: array}}`` (of ``policy_ids``, default all)."""
        if len(self._policies) == 1 and policy_ids is None:
            return self.policy.get_weights()
        ids = self._policies if policy_ids is None else policy_ids
        return {pid: self._policies[pid].get_weights() for pid in ids}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Load weights as :meth:`get_weights` gives them."""
        if len(self._policies) == 1 and not all(isinstance(v, Mapping) for v in weights.values()):
            self.policy.set_weights(dict(weights))
            return
        for policy_id, policy_weights in weights.items():
            self._policies[policy_id].set_weights(dict(policy_weights))

    def get_state(self) -> dict[str, PolicyState]:
        """``{policy id: PolicyState}``: weights, optimizer state and counters, for checkpoints."""
        return {pid: policy.get_state() for pid, policy in self._policies.items()}

    def set_state(self, states: Mapping[str, PolicyState]) -> None:
        """Restore what :meth:`get_state` returned (policies absent from ``states`` keep theirs)."""
        for policy_id, state in states.items():
            self._policies[policy_id].set_state(state)
