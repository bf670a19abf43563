"""One learner actor of a :class:`~rlgear.distributed.learner_group.LearnerGroup`.

:class:`LearnerActor` is a plain class holding a :class:`~rlgear.learner.Learner` in a process of
its own; :func:`make_actor_class` makes it a Ray actor class only when learner actors are asked
for, so importing this module never imports Ray. What crosses the process boundary is numpy and
plain data (batches, weights, policy states, stats), as for rollout workers.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlgear.learner import Learner
from rlgear.sample_batch import MultiAgentBatch, SampleBatch

#: What :meth:`LearnerActor.describe` answers for a policy attribute that is a method.
METHOD = "method"


def writable(value: Any) -> Any:
    """``value`` with every read-only array copied (``ray.get`` results live in shared memory, and
    torch must not write into them); batches, dicts, lists and tuples are walked."""
    if isinstance(value, np.ndarray):
        return value if value.flags.writeable else np.array(value)
    if isinstance(value, MultiAgentBatch):
        return MultiAgentBatch(
            {pid: writable(rows) for pid, rows in value.items()}, value.env_steps, value.agent_steps
        )
    if isinstance(value, SampleBatch):
        return SampleBatch({k: writable(v) for k, v in value.items()})
    if isinstance(value, Mapping):
        return type(value)({k: writable(v) for k, v in value.items()}) if type(value) is dict else value
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return type(value)(writable(v) for v in value)
    return value


class LearnerActor:
    """A learner in its own process: the backend, the policies and their update.

    Args:
        config: the resolved RunConfig.
        policy_class: the algorithm's policy class for the run's backend.
        backend_class: the backend to set up in this process (threads, seed).
        spaces: ``{policy id: (observation space as the policy sees it, action space)}``.
        rank: this learner's index in the group (0 sends the weights out).

    Every learner seeds its framework and policies from ``config.seed`` alike: the replicas draw
    the same minibatch rows, and each takes its shard of them.
    """

    def __init__(
        self,
        config: Any,
        policy_class: type,
        backend_class: type,
        spaces: Mapping[str, tuple[Any, Any]],
        rank: int,
    ):
        self.rank = rank
        self.backend = backend_class()
        self.backend.setup(config.learners.num_cpus_per_learner, config.seed)
        # the device among what this actor sees (Ray hides the GPUs it did not give it)
        self.backend.check_device(config.learners.device)
        self.backend.use_device(config.learners.device)
        self.learner = Learner(config, policy_class, device=config.learners.device, backend=self.backend)
        for policy_id, (observation_space, action_space) in spaces.items():
            self.learner.add_policy(policy_id, observation_space, action_space)
        self.group: Any = None
        #: What :meth:`attach` built around this learner (an offline run's dataset reader), or None.
        self.attached: Any = None

    # --- the process group ----------------------------------------------------------
    def ping(self) -> int:
        return self.rank

    def device(self) -> str:
        """Where this learner's policies learn (``learners.device`` resolved here)."""
        return self.learner.device

    def node_address(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def node_id(self) -> str:
        """The Ray node this learner runs on (placement checks)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def free_port(self, address: str) -> int:
        """A port free on ``address`` now, for the group's rendezvous (learner 0 listens there)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
            return int(probe.getsockname()[1])

    def join(self, world_size: int, address: str, port: int) -> int:
        """Join the data-parallel group (every learner calls it at once; it returns when all have)."""
        if address == "127.0.0.1":  # one node: the group's own connections stay on loopback too
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        device = str(getattr(self.learner, "device", "cpu"))
        self.group = self.backend.join_data_parallel_group(self.rank, world_size, address, port, device)
        for policy in self.learner.policy_map.values():
            policy.data_parallel = self.group
        return self.rank

    # --- learning ---------------------------------------------------------------------
    def update(self, batch: Any) -> dict[str, float]:
        return self.learner.update(writable(batch))

    def set_global_timestep(self, timestep: int) -> None:
        self.learner.set_global_timestep(timestep)

    def update_config(self, config: Any) -> None:
        """A live config change (PBT's, ``reset_config``): each policy takes its own resolved config."""
        from rlgear.config import multiagent

        self.learner.config = config
        for policy_id, policy in self.learner.policy_map.items():
            policy.update_config(multiagent.policy_config(config, policy_id))

    # --- weights and state -----------------------------------------------------------
    def get_weights(self, policy_ids: list[str] | None = None) -> dict[str, Any]:
        return self.learner.get_weights(policy_ids)

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        self.learner.set_weights(writable(dict(weights)))

    def get_state(self) -> dict[str, Any]:
        return self.learner.get_state()

    def set_state(self, states: Mapping[str, Any]) -> None:
        self.learner.set_state(
            {pid: dataclasses.replace(state, arrays=writable(state.arrays)) for pid, state in states.items()}
        )

    # --- a policy's own methods and attributes (the driver's RemotePolicy) -------------
    def describe(self, policy_id: str, name: str) -> tuple[str, Any]:
        """``(METHOD, None)`` when the policy's ``name`` is a method, else ``("value", value)``."""
        value = getattr(self.learner.policy_map[policy_id], name)
        return (METHOD, None) if callable(value) else ("value", value)

    def call(self, policy_id: str, name: str, args: tuple, kwargs: dict) -> Any:
        method = getattr(self.learner.policy_map[policy_id], name)
        return method(*writable(args), **writable(kwargs))

    def learn_on_batches(self, policy_id: str, batches: list[Any]) -> list[dict[str, float]]:
        policy = self.learner.policy_map[policy_id]
        return [policy.learn_on_batch(writable(batch)) for batch in batches]

    def set_attribute(self, policy_id: str, name: str, value: Any) -> None:
        setattr(self.learner.policy_map[policy_id], name, writable(value))

    # --- work that runs beside the learner, in its process -------------------------------
    def attach(self, factory: Any, num_learners: int) -> None:
        """``factory(learner, rank, num_learners, group)``: something that works with this learner
        in this process (an offline run's reader of its own shard of the dataset, which then feeds
        the learner without its data passing through the driver); :meth:`call_attached` calls it."""
        self.attached = factory(self.learner, self.rank, int(num_learners), self.group)

    def call_attached(self, method: str, *args: Any) -> Any:
        if self.attached is None:
            raise RuntimeError(f"learner {self.rank}: nothing is attached to call {method!r} on")
        return getattr(self.attached, method)(*writable(args))

    def stop(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None


def make_actor_class(num_cpus: float, num_gpus: float) -> Any:
    """:class:`LearnerActor` as a Ray actor class with these resources (imports Ray)."""
    import ray

    return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0, max_concurrency=1)(LearnerActor)
