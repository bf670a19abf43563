"""Connected clients as a vector env: one client plays one env slot.

How a step works (``step(actions)``):

1. Reply to every request taken at the previous step: ``action`` (row i of
   ``actions``), or ``episode_end`` for a terminated/truncated step.
2. Poll the sockets until every client in mid-episode has sent its next
   request (a client silent for ``client_timeout_s`` is dropped, the others go
   on), and clients between episodes had ``start_grace_s`` to send ``start``.
   Until ``min_clients`` have connected (once), or while no request at all is
   in, it keeps waiting (and gives up with EnvInterrupted on Ctrl-C/SIGTERM).
3. Emit one TimeStep row per slot: ``start`` -> FIRST, ``step`` -> MID, or
   LAST with discount 0 (terminated) / 1 (truncated). A slot without a request
   emits an *invalid* row (``TimeStep.valid`` False, step type LAST): empty
   slots, idle clients, and the step where a client dropped mid-episode. The
   evaluator never trains on or counts invalid rows and discards the episode
   they interrupt. Inference stays batched: the evaluator computes all B
   actions in one call, whatever number of clients sent a request.

A dropped client's slot emits its abort row before a new client's first request
there is used, so a FIRST never follows the old client's MID in the same column.

Clients that act locally (protocol 2, docs/protocol.md section 10) upload the steps they played;
the server queues their rows and this env *replays* them in the client's slot, one row per step,
exactly as if the client had sent them as ``start``/``step`` messages. The TimeStep says, in
``taken``, that those rows' actions were already taken (the client's action and its
log-probability under the policy it acted with), and the sampler records them instead of its own
(:class:`~rlgear.timestep.TakenActions`). So value predictions, GAE, fragments, episode metrics
and aborts work unchanged. A replaying slot whose queue runs empty mid-episode is waited for as a
silent version 1 client is (``client_timeout_s``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rlgear.env import EnvAdapter, EnvInterrupted, PolicyExport, VectorEnv, stop_requested
from rlgear.errors import ConfigError
from rlgear.external.wire import ErrorCode, encode
from rlgear.spaces import Discrete
from rlgear.timestep import StepType, TakenActions, TimeStep

from .policy_versions import PolicyVersions
from .server import Connection, PolicyServer, Request
from .settings import parse_settings

_FIRST, _MID, _LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
_EPISODE_END = encode("episode_end")
_POLL_S = 0.1  # longest single wait, so Ctrl-C and timeouts are noticed


class ExternalVectorEnv(VectorEnv):
    """``num_envs`` slots filled by clients connecting over TCP (see docs/protocol.md)."""

    takes_actions = True  # clients that act locally: their uploaded rows carry the action taken
    wants_policy_export = True  # ... and they fetch the policy as ONNX

    def __init__(self, server: PolicyServer, num_envs: int):
        self.server = server
        self.settings = server.settings
        self.num_envs = num_envs
        self.observation_space = self.settings.observation_space
        self.action_space = self.settings.action_space
        self.discrete = isinstance(self.action_space, Discrete)
        action_dtype = np.int64 if self.discrete else np.dtype(self.action_space.dtype)
        self._action_dtype = np.dtype(action_dtype)
        self._zero_obs = np.zeros(self.observation_space.shape, dtype=self.observation_space.dtype)
        self._zero_action = np.zeros(self.action_space.shape, dtype=self._action_dtype)
        self._env_ids = np.arange(num_envs, dtype=np.int32)
        self._last_action = np.zeros((num_envs, *self.action_space.shape), dtype=self._action_dtype)
        #: the connection whose request was taken for slot i at the last step (owed a reply)
        self._taken: list[Connection | None] = [None] * num_envs
        self._taken_last = np.zeros(num_envs, dtype=bool)
        #: slot i's running episode began with a FIRST this env emitted since the last reset
        self._live = np.zeros(num_envs, dtype=bool)
        # Discrete actions: one pre-encoded frame per action value (encoding is a hot-path cost)
        self._action_frames = (
            [encode("action", None, {"action": np.int64(a)}) for a in range(self.action_space.n)]
            if self.discrete and self.action_space.n <= 4096
            else None
        )
        self._started = False  # min_clients were connected once: from then on, step with whoever is there

    # --- VectorEnv ------------------------------------------------------------
    def set_policy_export(self, export: PolicyExport) -> None:
        """The run's acting policy: clients that act locally may now connect (protocol 2)."""
        self.server.versions = PolicyVersions(export)

    def reset(self, seed: int | None = None) -> TimeStep:
        """Forget running episodes (clients keep playing them, as invalid rows, until they end).

        Clients own their environments, so ``seed`` is not used. A client whose
        ``start`` is waiting for its reply becomes FIRST here; every other slot
        is invalid until its client starts a new episode.
        """
        self._live[:] = False
        obs = np.empty((self.num_envs, *self.observation_space.shape), dtype=self.observation_space.dtype)
        step_type = np.full(self.num_envs, _LAST, dtype=np.int32)
        valid = np.zeros(self.num_envs, dtype=bool)
        acted: dict[int, Request] = {}
        for i, conn in enumerate(self._taken):
            request = conn.last_request if conn is not None else None
            obs[i] = request.observation if request is not None else self._zero_obs
            if request is not None and request.kind == "start":
                step_type[i], valid[i], self._live[i] = _FIRST, True, True
                if request.trained is not None:
                    acted[i] = request
        return TimeStep(
            step_type=step_type,
            reward=np.zeros(self.num_envs, dtype=np.float32),
            discount=np.ones(self.num_envs, dtype=np.float32),
            observation=obs,
            prev_action=np.zeros_like(self._last_action),
            env_id=self._env_ids,
            valid=valid,
            taken=self._taken_actions(acted),
        )

    def step(self, actions: np.ndarray) -> TimeStep:
        actions = np.asarray(actions)
        self._reply(actions)
        self._gather()
        return self._emit()

    def close(self) -> None:
        self.server.shutdown()

    # --- the three phases of a step ------------------------------------------------
    def _reply(self, actions: np.ndarray) -> None:
        server = self.server
        now = time.monotonic()
        timeout, grace = self.settings.client_timeout_s, self.settings.start_grace_s
        for i, conn in enumerate(self._taken):
            if conn is None:
                continue
            self._taken[i] = None
            if conn.state != "ready" or conn.slot != i:
                continue  # dropped since
            conn.in_reply = False
            if conn.local:  # a replayed row: the client acted already, nothing to send
                request = conn.last_request
                if request is not None and request.action is not None:
                    self._last_action[i] = request.action
                conn.expect_by = now + (timeout if conn.in_episode else grace)
                continue
            if self._taken_last[i]:
                frame = _EPISODE_END
            else:
                action = np.asarray(actions[i], dtype=self._action_dtype)
                self._last_action[i] = action
                if self._action_frames is not None and 0 <= action < len(self._action_frames):
                    frame = self._action_frames[int(action)]
                else:
                    frame = encode("action", None, {"action": action})
            conn.expect_by = now + (timeout if conn.in_episode else grace)
            server.send(conn, frame)

    def _gather(self) -> None:
        """Poll until the requests this step waits for are in (see the module docstring)."""
        server = self.server
        server.poll(0.0)
        while True:
            now = time.monotonic()
            wait_until = None
            ready = have = 0
            for conn in server.slot_conn:
                if conn is None:
                    continue
                ready += 1
                if conn.request is None and conn.local:
                    conn.request = server.take_row(conn)
                if conn.request is not None:
                    have += 1
                    continue
                if conn.expect_by > now:
                    wait_until = conn.expect_by if wait_until is None else min(wait_until, conn.expect_by)
                elif conn.in_episode:
                    server.fail(
                        conn, ErrorCode.TIMEOUT, f"no step within {self.settings.client_timeout_s:g} s"
                    )
            if ready >= self.settings.min_clients:
                self._started = True
            if wait_until is None and have and self._started:
                return
            if stop_requested.is_set():
                raise EnvInterrupted("stopped while waiting for clients")
            server.poll(_POLL_S if wait_until is None else min(_POLL_S, max(0.0, wait_until - now)))

    def _emit(self) -> TimeStep:
        n = self.num_envs
        server = self.server
        step_type = np.full(n, _LAST, dtype=np.int32)
        reward = np.zeros(n, dtype=np.float32)
        discount = np.ones(n, dtype=np.float32)
        valid = np.zeros(n, dtype=bool)
        obs = np.empty((n, *self.observation_space.shape), dtype=self.observation_space.dtype)
        prev_action = np.zeros_like(self._last_action)
        acted: dict[int, Request] = {}
        for i in range(n):
            conn = server.slot_conn[i]
            request = conn.request if conn is not None else None
            if request is None or server.reserved[i]:
                # an invalid row; where a client dropped mid-episode it aborts that episode, so a
                # new client's request in the same slot waits for the next step
                obs[i] = self._zero_obs
                self._live[i] = False
                server.reserved[i] = False
                continue
            conn.request, conn.last_request, conn.in_reply = None, request, True
            self._taken[i] = conn
            obs[i] = request.observation
            if request.kind == "abort":  # an uploaded episode was dropped: discard its replayed rows
                obs[i] = self._zero_obs
                conn.in_episode, self._live[i] = False, False
                continue
            if request.trained is not None:
                acted[i] = request
            if request.kind == "start":
                conn.in_episode, conn.episode_return = True, 0.0
                self._taken_last[i] = False
                step_type[i], valid[i] = _FIRST, True
                self._live[i] = True
                continue
            done = request.terminated or request.truncated
            self._taken_last[i] = done
            conn.steps += 1
            conn.episode_return += request.reward
            if done:
                conn.in_episode = False
                conn.episodes += 1
                server.episodes_total += 1
                server.recent_returns.append(conn.episode_return)
            if not self._live[i]:
                continue  # an episode begun before reset(): invalid rows until it ends
            valid[i] = True
            reward[i] = request.reward
            prev_action[i] = self._last_action[i]
            if done:
                step_type[i] = _LAST
                discount[i] = 0.0 if request.terminated else 1.0
                self._live[i] = False
            else:
                step_type[i] = _MID
        taken = self._taken_actions({i: r for i, r in acted.items() if valid[i]})
        return TimeStep(step_type, reward, discount, obs, prev_action, self._env_ids, valid, taken=taken)

    def _taken_actions(self, acted: dict[int, Request]) -> TakenActions | None:
        """The uploaded rows of this step whose action the client took (None when there are none)."""
        if not acted:
            return None
        rows = np.zeros(self.num_envs, dtype=bool)
        first = next(iter(acted.values())).trained
        actions = np.zeros((self.num_envs, *np.shape(first)), dtype=np.asarray(first).dtype)
        logp = np.zeros(self.num_envs, dtype=np.float32)
        for i, request in acted.items():
            rows[i], actions[i], logp[i] = True, request.trained, request.logp
        return TakenActions(rows, actions, logp)


class ExternalAdapter(EnvAdapter):
    """``env.adapter: external``: a policy server that environments connect to over TCP."""

    description = "external envs: clients connect over TCP (rlgear.external.client, docs/protocol.md)"
    check_skip_reason = (
        "its envs are played by clients connecting over TCP, so there is no env to step in this process "
        "(tests/test_external_*.py drive it with real clients)"
    )

    def make(
        self,
        name: str,
        num_envs: int,
        *,
        kwargs: dict[str, Any],
        vectorization: str = "sync",
        horizon: int | None = None,
        worker_index: int = 0,
    ) -> VectorEnv:
        if horizon is not None:
            raise ConfigError(
                "workers.horizon: not supported by the external env: clients decide when episodes end "
                "(send truncated=true at your time limit)"
            )
        if worker_index != 0:
            raise ConfigError(
                f"env.adapter: external: one server per run, in the driver's rollout worker; worker "
                f"{worker_index} (a remote or evaluation worker) would need a server of its own, which is "
                "not supported: set workers.num_workers: 0, no separate evaluation workers, and raise "
                "workers.num_envs_per_worker (one slot per client)"
            )
        settings = parse_settings(dict(kwargs), num_envs)
        server = PolicyServer(settings, num_envs)
        server.announce()
        return ExternalVectorEnv(server, num_envs)
