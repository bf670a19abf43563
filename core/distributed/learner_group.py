"""N learner actors on Ray that learn as one :class:`~rlgear.learner.Learner`.

With ``learners.num_learners: N >= 1`` the Trainer's ``learner`` is a :class:`LearnerGroup`: the
same API as a Learner (``update``, ``policy_map``, weights, state, ``set_global_timestep``), with
the policies in N Ray actors (:mod:`rlgear.distributed.learner_actor`). With N >= 2 the actors
form one data-parallel group through the backend (``Backend.join_data_parallel_group``: a
``torch.distributed`` group for torch): each takes a shard of every minibatch and the gradients
are all-reduced, so the update is the one a single learner would make on the whole minibatch.

Calls go to every actor (each replica must step alike); the answer is learner 0's. Work can also
be attached to every learner, in its process (:meth:`LearnerGroup.attach`): an offline run's
reader of each learner's own shard of the dataset, which feeds its learner directly. A policy of
:attr:`LearnerGroup.policy_map` is a :class:`RemotePolicy`, through which an algorithm's own
calls (``update_target``, ``learn_on_batch``, ``td_errors``, ...) reach the replicas unchanged.

A learner that dies breaks the group's collectives, so the whole group is started again from the
last weights the driver fetched (optimizer state starts fresh), and the call that failed runs
again; past ``learners.max_restarts`` the run stops with
:class:`~rlgear.distributed.ray_session.LearnerFailureError` (the runner writes the last good
checkpoint first).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from rlgear.config import multiagent
from rlgear.errors import RLGearError, UnsupportedError
from rlgear.sample_batch import MultiAgentBatch, SampleBatch

#: Policy methods that only read: asked of learner 0 alone.
READ_ONLY_METHODS = frozenset(
    {
        "get_weights",
        "get_state",
        "get_target_weights",
        "epsilon",
        "compute_td_errors",
        "action_distribution_inputs",
        "get_initial_state",
        "compute_actions",
    }
)


def check_before_start(config: Any, policy_class: type, backend_class: type) -> None:
    """Refuse, before any worker or learner starts, what learner actors can't do: a framework-free
    algorithm (it learns in the driver), several learners on a backend without data-parallel
    learning, and more learners than the cluster can place."""

    learners = config.learners
    if getattr(policy_class, "framework_free", False):
        raise config.fail(
            "learners.num_learners",
            f"algorithm '{config.algorithm}' has a framework-free policy that learns in the driver "
            "(no gradient update to move): set learners.num_learners: 0",
        )
    if learners.num_learners >= 2 and not getattr(backend_class, "supports_data_parallel", False):
        raise config.fail(
            "learners.num_learners",
            f"backend '{config.backend}' has no data-parallel learners (got {learners.num_learners}): "
            "use 0 or 1 learner, or backend: torch",
        )
    if str(learners.device).startswith("cuda") and learners.num_gpus_per_learner <= 0:
        raise config.fail(
            "learners.num_gpus_per_learner",
            f"learners.device is '{learners.device}', but a learner actor sees only the GPUs Ray gives it "
            "and this is 0: set it (e.g. 1), or learners.device: cpu",
        )
    init_ray_for(config)
    wait_for_learner_resources(config)


def init_ray_for(config: Any) -> None:
    """Start (or attach to) Ray with the run's CPU budget, the learners' included."""
    from rlgear.distributed import ray_session

    ray_session.init_ray(
        num_cpus=ray_session.run_num_cpus(config),
        address=config.workers.ray.address,
        object_store_memory=config.workers.ray.object_store_memory,
        quiet=not config.workers.ray.log_to_driver,
    )


def wait_for_learner_resources(config: Any) -> None:
    """:func:`~rlgear.distributed.ray_session.check_learner_resources`, which on a cluster rlgear
    attached to (``workers.ray.address``) is retried for ``workers.ray.worker_start_timeout_s``:
    a node being lost and replaced is not a cluster too small."""
    import time

    from rlgear.distributed import ray_session

    learners = config.learners
    deadline = time.monotonic() + config.workers.ray.worker_start_timeout_s
    while True:
        try:
            ray_session.check_learner_resources(
                learners.num_learners, learners.num_cpus_per_learner, learners.num_gpus_per_learner
            )
            return
        except ray_session.RayResourceError:
            if config.workers.ray.address is None or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


class LearnerGroup:
    """``learners.num_learners`` learner actors holding the run's trainable policies.

    Args:
        config: the resolved RunConfig.
        policy_class: the algorithm's policy class for the run's backend.
        backend_class: the backend each actor sets up.
        spaces: ``{policy id: (observation space as the policy sees it, action space)}``.
        weights: the weights to start from (the driver's, so that every run with the same seed
            starts alike however many learners it has); None keeps the learners' own.
    """

    def __init__(
        self,
        config: Any,
        policy_class: type,
        backend_class: type,
        spaces: Mapping[str, tuple[Any, Any]],
        weights: Mapping[str, Any] | None = None,
    ):
        from rlgear.distributed import ray_session

        self.config = config
        self._classes = (policy_class, backend_class)
        self._spaces = dict(spaces)
        learners = config.learners
        self.num_learners = int(learners.num_learners)
        init_ray_for(config)
        wait_for_learner_resources(config)
        self.ray = ray_session.import_ray()
        #: Groups started again after a learner died (``num_learner_restarts`` in results).
        self.num_restarts = 0
        self._restarts_before_resume = 0
        self._actors: list[Any] = []
        self._placement_group: Any = None
        self._method_names: set[str] = set()
        self._last_weights: Any = None
        self._global_timestep = 0
        self._device: str | None = None
        self._broken = False  # max_restarts used up: only the last weights are left (for a checkpoint)
        self._attachment: Any = None  # attach()'s factory, attached again to a restarted group
        self._start_with_retries()
        if weights is not None:
            self.set_weights(weights)
        self._proxies = {pid: RemotePolicy(self, pid) for pid in self._spaces}

    # --- the actors ---------------------------------------------------------------------
    @property
    def device(self) -> str:
        """Where learner 0's policies learn (``learners.device`` as resolved in the actor)."""
        if self._device is None:
            self._device = str(self._ask_first("device"))
        return self._device

    @property
    def gpus_per_learner(self) -> float:
        return float(self.config.learners.num_gpus_per_learner)

    def _start(self) -> None:
        """Place the actors (one placement group, ``learners.placement``), start them, and with
        two or more join them into one data-parallel group."""
        from rlgear.distributed import learner_actor, ray_session

        ray = self.ray
        learners = self.config.learners
        bundle: dict[str, float] = {"CPU": float(learners.num_cpus_per_learner)}
        if self.gpus_per_learner > 0:
            bundle["GPU"] = self.gpus_per_learner
        strategy = "SPREAD" if learners.placement == "spread" else "PACK"
        timeout = self.config.workers.ray.worker_start_timeout_s
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group = placement_group([dict(bundle) for _ in range(self.num_learners)], strategy=strategy)
        try:
            ray.get(group.ready(), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            free = ray.available_resources()
            raise ray_session.RayResourceError(
                f"learners: {self.num_learners} learner(s) x {bundle} could not be placed within "
                f"{timeout:g} s (workers.ray.worker_start_timeout_s); free now: "
                f"{free.get('CPU', 0.0):g} CPUs, {free.get('GPU', 0.0):g} GPUs"
            ) from None
        self._placement_group = group
        actor_class = learner_actor.make_actor_class(learners.num_cpus_per_learner, self.gpus_per_learner)
        policy_class, backend_class = self._classes
        self._actors = [
            actor_class.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=rank
                )
            ).remote(self.config, policy_class, backend_class, self._spaces, rank)
            for rank in range(self.num_learners)
        ]
        try:
            ray.get([actor.ping.remote() for actor in self._actors], timeout=timeout)
            if self.num_learners >= 2:
                addresses = ray.get([actor.node_address.remote() for actor in self._actors])
                address = "127.0.0.1" if len(set(addresses)) == 1 else addresses[0]
                port = ray.get(self._actors[0].free_port.remote(address))
                ray.get(
                    [actor.join.remote(self.num_learners, address, port) for actor in self._actors],
                    timeout=timeout,
                )
        except Exception as err:
            self._kill_all()
            cause = getattr(err, "cause", None)
            if isinstance(cause, RLGearError):
                raise cause from None
            raise

    def _start_with_retries(self) -> None:
        """:meth:`_start`, again when a learner dies while the group starts (its node lost), as a
        restart counted against ``learners.max_restarts``."""
        from rlgear.distributed.ray_session import is_actor_failure

        while True:
            try:
                self._start()
                return
            except Exception as err:
                if not is_actor_failure(err):
                    raise
                self._restart(err, start=False)

    def _kill_all(self) -> None:
        for actor in self._actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
        self._actors = []
        if self._placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):
                remove_placement_group(self._placement_group)
            self._placement_group = None

    def _restart(self, error: BaseException, start: bool = True) -> None:
        """Start the whole group again from the last weights (a dead learner breaks the collectives
        of the others), or stop the run when ``learners.max_restarts`` is used up."""
        from rlgear.distributed.ray_session import LearnerFailureError

        restarts = self.num_restarts - self._restarts_before_resume
        why = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        if restarts >= self.config.learners.max_restarts:
            self._kill_all()
            self._broken = True
            raise LearnerFailureError(
                f"a learner actor failed ({why}) after {restarts} learner restarts since the run "
                f"(re)started; learners.max_restarts is {self.config.learners.max_restarts}: the learners "
                "keep dying (out of memory? a lost node?), see the Ray logs (/tmp/ray/session_latest/logs)"
            ) from error
        self._kill_all()
        self.num_restarts += 1
        if not start:  # the caller starts the group (and retries)
            return
        self._start_with_retries()
        if self._last_weights is not None:
            self._broadcast("set_weights", self._last_weights, restart=False)
        self._broadcast("set_global_timestep", self._global_timestep, restart=False)
        if self._attachment is not None:
            self._broadcast("attach", self._attachment, self.num_learners, restart=False)

    def _raise_if_broken(self) -> None:
        if self._broken:
            from rlgear.distributed.ray_session import LearnerFailureError

            raise LearnerFailureError(
                f"the learner actors are gone (learners.max_restarts {self.config.learners.max_restarts} used up)"
            )

    # --- calls on every learner --------------------------------------------------------
    def _put_large(self, value: Any) -> Any:
        """One object-store copy of a batch, an array dict or a list of batches for all learners."""
        if isinstance(value, SampleBatch | MultiAgentBatch | dict | list):
            return self.ray.put(value)
        return value

    def _broadcast(self, method: str, *args: Any, restart: bool = True) -> Any:
        """``method(*args)`` on every learner; learner 0's answer. A learner that died restarts the
        group and the call runs again on the new one."""
        return self._broadcast_all(method, *args, restart=restart)[0]

    def _broadcast_all(self, method: str, *args: Any, restart: bool = True) -> list[Any]:
        """``method(*args)`` on every learner; every learner's answer, by rank (see :meth:`_broadcast`)."""
        from rlgear.distributed.ray_session import is_actor_failure

        self._raise_if_broken()
        while True:
            refs_args = [self._put_large(a) for a in args]
            refs = [getattr(actor, method).remote(*refs_args) for actor in self._actors]
            try:
                return list(self.ray.get(refs))
            except Exception as err:
                dead = _first_dead(self.ray, refs) if not is_actor_failure(err) else err
                if dead is None or not restart:
                    _raise_cause(err)
                    raise
                self._restart(dead)

    def _ask_first(self, method: str, *args: Any) -> Any:
        """``method(*args)`` on learner 0 only (a read)."""
        from rlgear.distributed.ray_session import is_actor_failure

        self._raise_if_broken()
        while True:
            try:
                return self.ray.get(getattr(self._actors[0], method).remote(*args))
            except Exception as err:
                if not is_actor_failure(err):
                    _raise_cause(err)
                    raise
                self._restart(err)

    # --- the Learner API ----------------------------------------------------------------
    @property
    def policy_map(self) -> dict[str, RemotePolicy]:
        return dict(self._proxies)

    @property
    def policy(self) -> RemotePolicy:
        if len(self._proxies) != 1:
            raise UnsupportedError(
                f"this learner group has {len(self._proxies)} policies ({', '.join(self._proxies)}): "
                "use learner.policy_map[policy_id]"
            )
        return next(iter(self._proxies.values()))

    @property
    def policies_to_train(self) -> list[str]:
        return [pid for pid in multiagent.policies_to_train(self.config) if pid in self._proxies]

    def set_global_timestep(self, timestep: int) -> None:
        self._global_timestep = int(timestep)
        self._broadcast("set_global_timestep", int(timestep))

    def update(self, batch: SampleBatch | MultiAgentBatch) -> dict[str, float]:
        """Learn on ``batch`` on every learner (each on its shard of each minibatch)."""
        return self._broadcast("update", batch)

    def update_config(self, config: Any) -> None:
        self.config = config
        self._broadcast("update_config", config)

    def get_weights(self, policy_ids: Iterable[str] | None = None) -> dict[str, Any]:
        from rlgear.distributed.learner_actor import writable

        weights = writable(self._ask_first("get_weights", None if policy_ids is None else list(policy_ids)))
        if policy_ids is None:
            self._last_weights = weights
        return weights

    def weights_ref(self) -> Any:
        """An object-store reference to learner 0's weights, for rollout workers to read directly."""
        return self._actors[0].get_weights.remote(None)

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        self._last_weights = dict(weights)
        self._broadcast("set_weights", dict(weights))

    def get_state(self) -> dict[str, Any]:
        """Learner 0's policy states; once the learners are gone for good (``max_restarts`` used
        up), the last weights the driver fetched, so the run can still write its last good
        checkpoint (its optimizer state then starts fresh on resume)."""
        if self._broken:
            return self._last_weights_state()
        return self._ask_first("get_state")

    def _last_weights_state(self) -> dict[str, Any]:
        from rlgear.policy import PolicyState

        weights = self._last_weights or {}
        per_policy = weights if len(self._spaces) > 1 else {next(iter(self._spaces)): weights}
        return {
            pid: PolicyState(
                arrays={f"weights/{k}": v for k, v in dict(w).items()},
                meta={"global_timestep": self._global_timestep},
            )
            for pid, w in per_policy.items()
        }

    def set_state(self, states: Mapping[str, Any]) -> None:
        self._broadcast("set_state", dict(states))
        self._last_weights = None
        self.get_weights()

    # --- work attached to every learner ------------------------------------------------
    def attach(self, factory: Any) -> None:
        """Build ``factory(learner, rank, num_learners, data_parallel_group)`` in every learner's
        process (see :meth:`LearnerActor.attach`). ``factory`` is pickled to each actor; the group
        keeps it and attaches it again after a restart, so what it holds (e.g. the readers' last
        states, updated by the caller) is where a restarted group's attachments start from."""
        self._attachment = factory
        self._broadcast_all("attach", factory, self.num_learners)

    def on_each(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` of every learner's attached object, at once; the answers by rank."""
        return self._broadcast_all("call_attached", method, *args)

    def node_ids(self) -> list[str]:
        """The Ray node of each learner, by rank."""
        return self.ray.get([actor.node_id.remote() for actor in self._actors])

    def restore_fault_state(self, restarts: int) -> None:
        """Restarts counted before a resume: the count goes on; ``max_restarts`` counts from here."""
        self.num_restarts = self._restarts_before_resume = int(restarts)

    def fault_stats(self) -> dict[str, float]:
        return {"num_learner_restarts": float(self.num_restarts)}

    def stop(self) -> None:
        for actor in self._actors:
            with contextlib.suppress(Exception):
                self.ray.get(actor.stop.remote(), timeout=10)
        self._kill_all()


class RemotePolicy:
    """A driver-side stand-in for one policy held by every learner of a :class:`LearnerGroup`.

    Method calls run on every replica (learner 0's answer is returned), except the reads of
    :data:`READ_ONLY_METHODS`; attribute reads come from learner 0 (``config`` is answered here);
    attribute writes reach every replica. So an algorithm's code written against a Policy
    (``policy.update_target(tau)``, ``policy.td_errors``) works unchanged with learner actors.
    """

    def __init__(self, group: LearnerGroup, policy_id: str):
        object.__setattr__(self, "_group", group)
        object.__setattr__(self, "policy_id", policy_id)

    @property
    def config(self) -> Any:
        group = self._group
        return multiagent.policy_config(group.config, self.policy_id)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        group: LearnerGroup = self._group
        if name not in group._method_names:
            kind, value = group._ask_first("describe", self.policy_id, name)
            if kind != "method":
                return value
            group._method_names.add(name)
        if name in READ_ONLY_METHODS:
            return lambda *args, **kwargs: group._ask_first("call", self.policy_id, name, args, kwargs)
        return lambda *args, **kwargs: group._broadcast("call", self.policy_id, name, args, kwargs)

    def learn_on_batches(self, batches: list[Any]) -> list[dict[str, float]]:
        """``learn_on_batch`` on each of ``batches`` in turn, in one call to the learners (replay
        algorithms' gradient steps of one training step: one round trip instead of one per step)."""
        return self._group._broadcast("learn_on_batches", self.policy_id, list(batches))

    def __setattr__(self, name: str, value: Any) -> None:
        self._group._broadcast("set_attribute", self.policy_id, name, value)

    def __repr__(self) -> str:
        return f"RemotePolicy({self.policy_id!r} on {self._group.num_learners} learner(s))"


def _first_dead(ray: Any, refs: list[Any]) -> BaseException | None:
    """The actor failure behind a failed collective call, if one of the learners died.

    When one learner dies mid-step the survivors' collectives fail too (a plain task error); the
    death is what the group must recover from, so each reference is checked for it.
    """
    from rlgear.distributed.ray_session import is_actor_failure

    for ref in refs:
        try:
            ray.get(ref, timeout=30)
        except Exception as err:
            if is_actor_failure(err):
                return err
    return None


def _raise_cause(err: BaseException) -> None:
    """An rlgear error raised inside a learner comes back as itself (the CLI shows its message)."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, RLGearError):
        raise cause from None
