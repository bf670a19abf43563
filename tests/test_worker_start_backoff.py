"""A replacement worker that fails to start is started again after a backoff of 1, 2, 4 ... 30 s.

No Ray here: the WorkerSet's Ray side (``RemoteWorkerFactory``) is replaced by an
in-process fake whose actors are plain Evaluators, called synchronously, and the
WorkerSet's clock is a fake one the test moves. Everything else is the real code:
the WorkerSet's replacement bookkeeping, the sampling op that hands a pending
slot's share to the live worker, and the trainer that reports the counters.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from rlgear.discovery import registry
from rlgear.distributed import remote_worker
from rlgear.distributed import worker_set as evaluator_mod
from rlgear.sampling.rollout_worker import RolloutWorker
from tests.conftest import small_config

PPO = registry.load_algorithm("ppo")
RealFactory = remote_worker.RemoteWorkerFactory


class FakeActorDied(Exception):
    """What the fake Ray raises for a call on a dead actor (Ray's ActorDiedError)."""


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeRef:
    """A finished call: its value, or the error ``ray.get`` raises."""

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error


class FakeRay:
    class exceptions:  # mirrors ray.exceptions
        class GetTimeoutError(Exception):
            pass

        class RayTaskError(Exception):
            pass

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.failed_gets: list[tuple[int, float]] = []  # (worker id, time) of each failed ping

    def put(self, value: Any) -> FakeRef:
        return FakeRef(value)

    def wait(self, refs: list, num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        return list(refs[:num_returns]), list(refs[num_returns:])  # every call has finished

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        if isinstance(ref, list):
            return [self.get(r) for r in ref]
        if ref.error is not None:
            if getattr(ref, "ping_of", None) is not None:
                self.failed_gets.append((ref.ping_of, self.clock.now))
            raise ref.error
        return ref.value

    def available_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}


class FakeActor:
    """A remote worker: ``handle.method.remote(*args)`` runs at once on an in-process RolloutWorker."""

    def __init__(self, worker_id: int, evaluator: RolloutWorker | None):
        self.worker_id = worker_id
        self.evaluator = evaluator
        self.dead = evaluator is None  # an actor without an evaluator dies before it answers
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)

    def run(self, name: str, *args: Any) -> Any:
        ev = self.evaluator
        if name == "ping":
            return self.worker_id
        if name == "set_weights":
            return ev.set_weights({k: np.array(v) for k, v in args[0].items()})
        if name == "apply":
            return args[0](ev, *args[1:])
        return getattr(ev, name)(*args)


class _Method:
    def __init__(self, actor: FakeActor, name: str):
        self.actor, self.name = actor, name

    def remote(self, *args: Any) -> FakeRef:
        self.actor.calls.append(self.name)
        if self.actor.dead:
            return FakeRef(
                error=FakeActorDied(f"The actor died unexpectedly (worker {self.actor.worker_id})")
            )
        args = tuple(a.value if isinstance(a, FakeRef) else a for a in args)  # Ray resolves ref arguments
        return FakeRef(self.actor.run(self.name, *args))


class FakeFactory:
    """Stands in for RemoteWorkerFactory: ``fail_starts[worker_id]`` next launches die before answering."""

    clock: FakeClock  # set by the fixture

    def __init__(
        self, config, policy_class, env_adapter_class, postprocess_fn, hooks=None, check_spaces=None
    ):
        self.config = config
        self.ray = FakeRay(self.clock)
        self._args = (policy_class, env_adapter_class, postprocess_fn)
        self._hooks, self._check_spaces = hooks, check_spaces
        self.fail_starts: dict[int, int] = {}
        self.launches: list[tuple[int, float, FakeActor]] = []  # (worker id, time, actor)
        self.killed: list[FakeActor] = []

    def start(self, worker_ids, config) -> dict[int, FakeActor]:
        return {worker_id: self.launch(worker_id, config)[0] for worker_id in worker_ids}

    def launch(self, worker_id: int, config) -> tuple[FakeActor, FakeRef]:
        if self.fail_starts.get(worker_id, 0) > 0:
            self.fail_starts[worker_id] -= 1
            actor = FakeActor(worker_id, None)
        else:
            policy_class, adapter_class, postprocess_fn = self._args
            evaluator = RolloutWorker(
                config,
                policy_class,
                adapter_class,
                postprocess_fn,
                worker_id,
                self._hooks,
                self._check_spaces,
            )
            actor = FakeActor(worker_id, evaluator)
        self.launches.append((worker_id, self.clock.now, actor))
        ping = actor.ping.remote()
        ping.ping_of = worker_id
        return actor, ping

    def kill(self, handle: FakeActor) -> None:
        if not handle.dead and handle.evaluator is not None:
            handle.evaluator.stop()
        handle.dead = True
        self.killed.append(handle)

    def check_restart_allowed(self, worker_id: int, restarts: int, error: BaseException | None) -> None:
        RealFactory.check_restart_allowed(self, worker_id, restarts, error)  # the real limits

    def raise_if_not_failure(self, err: BaseException) -> None:
        if not isinstance(err, FakeActorDied):
            raise err


@pytest.fixture
def clock(monkeypatch):
    """The WorkerSet's clock (its ``time.monotonic`` and ``time.sleep``), moved by the test."""
    fake = FakeClock()
    monkeypatch.setattr(evaluator_mod, "time", fake)
    monkeypatch.setattr(FakeFactory, "clock", fake, raising=False)
    return fake


@pytest.fixture
def trainer(tmp_path, monkeypatch, clock):
    """A PPO trainer with two remote workers on the fake Ray."""
    monkeypatch.setattr(remote_worker, "RemoteWorkerFactory", FakeFactory)
    made = PPO(small_config(tmp_path, workers={"num_workers": 2, "num_envs_per_worker": 2}))
    yield made
    made.stop()


def _replacement_launches(factory: FakeFactory, worker_id: int) -> list[float]:
    return [t for wid, t, _ in factory.launches if wid == worker_id][1:]  # the first is the original


def test_a_replacement_that_keeps_dying_is_retried_after_1_2_4_8_16_then_30_s(trainer, clock):
    workers = trainer.workers
    factory: FakeFactory = workers._remote
    factory.fail_starts[2] = 7  # the next 7 starts of slot 2 die before answering, the 8th lives
    victim = workers.remote_worker(2)
    victim.dead = True
    assert workers.replace_worker(2, victim, FakeActorDied("The actor died unexpectedly")) is None
    assert workers.pending_worker_ids == [2] and workers.remote_worker_ids == [1]
    start = clock.now
    while workers.remote_worker(2) is None:
        assert clock.now - start < 300, "the replacement never joined"
        clock.advance(0.25)
        workers.poll_replacements()
        if workers.pending_worker_ids:
            assert workers.fault_stats()["num_pending_workers"] == 1
    launches = _replacement_launches(factory, 2)
    failures = [t for wid, t in factory.ray.failed_gets if wid == 2]
    assert len(launches) == 8 and len(failures) == 7
    # each start waits its backoff after the previous one was seen dying, not a tick more or less
    assert [launch - failed for failed, launch in zip(failures, launches[1:], strict=True)] == [
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        30.0,
        30.0,
    ]
    assert workers.num_start_failures == 7
    stats = workers.fault_stats()
    assert stats["num_worker_start_failures"] == 7
    assert stats["num_worker_restarts"] == 1  # one failure replaced, however many starts it took
    assert stats["num_pending_workers"] == 0 and stats["num_healthy_workers"] == 2
    dead_starts = [actor for wid, _, actor in factory.launches[-8:-1] if wid == 2]
    assert all(actor in factory.killed for actor in dead_starts)  # each dead start is cleaned up
    joined = workers.remote_worker(2)
    assert joined is factory.launches[-1][2] and joined.calls[:2] == ["ping", "set_weights"]
    for name, value in trainer.policy.get_weights().items():  # it starts with the learner's weights
        np.testing.assert_array_equal(joined.evaluator.get_weights()[name], value)


def test_while_a_replacement_fails_to_start_the_run_goes_on_with_the_live_worker(trainer, clock):
    workers = trainer.workers
    factory: FakeFactory = workers._remote
    first = trainer.train()
    assert first["num_worker_start_failures"] == 0 and first["num_healthy_workers"] == 2
    live, victim = workers.remote_worker(1), workers.remote_worker(2)
    share = live.calls.count("sample_with_count")  # worker 1's sample requests in one iteration
    assert share > 0 and victim.calls.count("sample_with_count") == share
    factory.fail_starts[2] = 2  # dies twice before answering, then starts
    victim.dead = True
    results, live_samples = [], []
    while len(results) < 6:
        before = live.calls.count("sample_with_count")
        results.append(trainer.train())
        live_samples.append(live.calls.count("sample_with_count") - before)
        clock.advance(1.0)
    pending = [r["num_pending_workers"] for r in results]
    assert [r["num_worker_start_failures"] for r in results] == [1, 2, 2, 2, 2, 2]
    assert pending == [1, 1, 1, 0, 0, 0]
    assert all(r["num_worker_restarts"] == 1 and r["worker_failures/worker_died"] == 1 for r in results)
    # the run goes on meanwhile: every iteration trains on a full batch
    totals = [first["timesteps_total"]] + [r["timesteps_total"] for r in results]
    # (64 rows per batch; the rows where an env autoresets are not env steps)
    assert all(r["timesteps_this_iter"] >= 56 for r in results), [r["timesteps_this_iter"] for r in results]
    assert all(b > a for a, b in itertools.pairwise(totals))
    # worker 1 takes slot 2's share until the replacement is live at the start of an iteration
    assert live_samples == [2 * share] * 4 + [share] * 2
    t0 = clock.now - 6.0  # the time of the first iteration after the kill
    assert _replacement_launches(factory, 2) == [t0, t0 + 1.0, t0 + 3.0]  # backoff 1 s, then 2 s
    replacement = workers.remote_worker(2)
    assert replacement is not victim and replacement is factory.launches[-1][2]
    samples = replacement.calls.count("sample_with_count")
    assert samples > 0  # back in the rounds once it answered
    assert replacement.calls.index("set_weights") < replacement.calls.index("sample_with_count")
