"""The sampler every run steps: one collector per policy, one stream per agent.

A single-agent env is its one-agent case (:class:`~rlgear.sampling.agents.OneAgentEnv`); a
:class:`~rlgear.env.MultiAgentVectorEnv` has several agents per env slot.

Each policy's :class:`~rlgear.sampling.collector.PolicyCollector` acts on its *slots*, the
(agent, env slot) pairs the policy mapping gives it; slot ``a * num_envs + i`` is the
policy's ``a``-th agent in env slot ``i``. Every env step, each policy computes actions once,
for its active slots only, and the rows of the step are recorded time-major ``[T, S]`` with the
``active`` mask. At a fragment cut the rows of each slot are compacted to that agent's own
stream (inactive rows dropped): its first row is the one carried from the previous fragment
(the last row it had there, which was that fragment's bootstrap row), its last row is this
fragment's bootstrap row and is carried on. So GAE, n-step returns and sequences run along one
agent's trajectory, never across agents; slots of equal length are postprocessed together
(``[n, k]`` time-major), by the algorithm's own postprocess function.

With ``workers.batch_mode: complete_episodes`` there is no fragment cut: each slot's rows are
kept until its agent's LAST, and only whole agent episodes (FIRST to LAST, ``[T_e, 1]`` each)
are postprocessed, as single-agent episodes are (:meth:`Sampler.sample_episodes`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.discovery import hooks as hooks_mod
from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv
from rlgear.errors import UnsupportedError
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
from rlgear.sampling.agents import AgentSlots, OneAgentEnv, check_policy_spaces
from rlgear.sampling.collector import PolicyCollector, take_rows
from rlgear.sampling.episode_recorder import EpisodeRecorder
from rlgear.sampling.metrics import Episode, env_info_row, reported_env_return
from rlgear.sampling.rows import (  # TAKEN_LOGP and the taken-action helpers are importable from here too
    PolicyStream,
    _empty_like,
    _merge_taken_logp,
    _with_taken,
    drop_invalid_rows,
)
from rlgear.sampling.sequences import chop_into_sequences
from rlgear.timestep import StepType, TimeStep

_FIRST, _MID, _LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
_NOT_RUNNING = object()  # _running's default: no episode start seen in that slot
STATE = "state"  # the column of the env's global state (MultiAgentTimeStep.state), when it gives one


class Sampler:
    """The recording loop of an :class:`~rlgear.sampling.rollout_worker.RolloutWorker` (it owns the env),
    for multi-agent envs and, through :class:`OneAgentEnv`, for single-agent ones.

    ``bootstrap_row`` says what a fragment's bootstrap row is for a slot still active at the cut:

    * True (single-agent runs): the current step, acted on without advancing the recurrent state
      and recorded as the fragment's last row; the next fragment records it again as its first
      (acted on with the weights of that time). So fragments are ``[T+1, B]`` as they always were.
    * False (multi-agent runs): the slot's last row acted on and stepped, carried into the next
      fragment (an agent's next step may come many env steps later, in turn-based games).

    Either way a slot not active at the cut carries its last row, and a row is trained exactly once.
    """

    def __init__(
        self,
        evaluator: Any,
        env: MultiAgentVectorEnv,
        collectors: dict[str, PolicyCollector],
        agents_of_policy: dict[str, list[str]],
        postprocess_fn: Callable[..., SampleBatch],
    ):
        self.evaluator = evaluator
        self.env = env
        self.num_envs = env.num_envs
        self.possible_agents = tuple(env.possible_agents)
        #: One agent acting everywhere (a single-agent env): its step index is the env's episode
        #: length, its episode id the env's, its rows are never inactive (fast paths below).
        self.single_agent = isinstance(env, OneAgentEnv)
        self.bootstrap_row = self.single_agent
        #: The env may report actions as taken already (``VectorEnv.takes_actions``; single-agent
        #: envs only): they are recorded instead of the policy's (:func:`_with_taken`).
        self.takes_actions = self.single_agent and bool(getattr(env.env, "takes_actions", False))
        agent_index = {a: i for i, a in enumerate(self.possible_agents)}
        self.streams = {
            pid: PolicyStream(collectors[pid], AgentSlots(agents, self.num_envs, agent_index))
            for pid, agents in agents_of_policy.items()
        }
        self._single = next(iter(self.streams.values()))  # the one stream of a single-agent env
        self.postprocess_fn = postprocess_fn
        n = self.num_envs
        self._starting = np.ones(n, dtype=bool)  # slots whose current step is an episode's reset
        self._episode_ids = np.zeros(n, dtype=np.int64)
        self._episode_return = np.zeros(n, dtype=np.float64)
        self._policy_return = {pid: np.zeros(n, dtype=np.float64) for pid in self.streams}
        #: per policy and slot: whether its agents act in the slot's episode (a league player's own slots)
        self._policy_part = {pid: np.zeros(n, dtype=bool) for pid in self.streams}
        self._episode_length = np.zeros(n, dtype=np.int64)
        self._all_mid = np.full(n, _MID, dtype=np.int32).tobytes()  # TimeStep.step_type is int32
        self._next_episode_id = 0
        #: per env slot whose episode start was seen: its Episode (for hooks) or None (no hooks)
        self._running: dict[int, Episode | None] = {}
        self.agent_steps = 0
        #: Whole raw episodes for ``offline.output`` (:meth:`start_recording`); None when off.
        self.recorder: EpisodeRecorder | None = None

    def start_recording(self) -> EpisodeRecorder:
        """Record every episode this sampler steps (raw observations, env actions, behaviour logp)."""
        if not self.single_agent:
            raise UnsupportedError(
                "offline.output: recording a multi-agent env is not supported (a Minari dataset holds one "
                "agent's episodes); record a single-agent env, or leave offline.output unset"
            )
        # an episode's rows are completed as a fragment's are: deferred logp, then taken actions' logp
        finish = (self._single.collector.policy.finish_fragment, _merge_taken_logp)
        self.recorder = EpisodeRecorder(self.num_envs, finish)
        return self.recorder

    # --- stepping -------------------------------------------------------------------
    def reset(self, seed: int | None) -> None:
        for stream in self.streams.values():
            stream.clear()
        self._running.clear()
        self._starting[:] = True
        if self.recorder is not None:
            self.recorder.reset()
        self._observe(self.env.reset(seed=seed))

    def _observe(self, mts: MultiAgentTimeStep) -> None:
        if self.single_agent:  # the filter skips the rows TimeStep.valid says carry no step
            stream = self._single
            if self.recorder is not None:  # the env's own observations: before preprocessing and filter
                self.recorder.observe(mts.steps[OneAgentEnv.AGENT])
            stream.ts = stream.collector.observe(mts.steps[OneAgentEnv.AGENT])
            stream.ts_active = mts.active[OneAgentEnv.AGENT]
            self._track(mts)
            return
        state = mts.state  # the env's global state: recorded with each row only when the env gives one
        for stream in self.streams.values():
            ts, active = stream.slots.gather(mts)
            stream.ts = stream.collector.observe(ts, valid=active)
            stream.ts_active = active
            stream.state = None if state is None else state[stream.slots.env_of_slot]
        self._track(mts)

    def _track(self, mts: MultiAgentTimeStep) -> None:
        """Episode bookkeeping per env slot: returns summed over agents, per policy, env steps."""
        ev = self.evaluator
        valid = None
        if self.single_agent:
            ts = self._single.ts
            valid = ts.valid if ts.valid is not None and not ts.valid.all() else None
            if valid is None and ts.step_type.tobytes() == self._all_mid:
                # fast path: no episode starts or ends (comparing the bytes costs less than any reduction)
                ev._env_steps += self.num_envs
                self.agent_steps += self.num_envs
                self._episode_return += ts.reward
                self._episode_length += 1
                return
            if valid is not None:
                for i in np.flatnonzero(~valid).tolist():
                    if self._running.pop(i, _NOT_RUNNING) is not _NOT_RUNNING:
                        ev.episodes_aborted += 1  # its client dropped: never reported, rows dropped
            starting = ts.step_type == _FIRST  # an external env's slot may start with no end before
        else:  # an async pool's slot (MultiAgentTimeStep.stepped) starts when it next steps after its end
            starting = self._starting if mts.stepped is None else self._starting & mts.stepped
        if np.count_nonzero(starting):
            self._start_episodes(starting)
        moved = ~starting if mts.stepped is None else ~starting & mts.stepped
        if valid is not None:  # rows carrying no env step (TimeStep.valid)
            moved &= valid
        if self.single_agent:
            steps = int(np.count_nonzero(moved))
            ev._env_steps += steps
            self.agent_steps += steps
            self._episode_return += np.where(moved, ts.reward, 0.0)
        else:
            ev._env_steps += int(np.count_nonzero(moved))
            for pid, stream in self.streams.items():
                stepped = stream.ts_active & (stream.ts.step_type != _FIRST)
                self.agent_steps += int(np.count_nonzero(stepped))
                per_env = np.where(stepped, stream.ts.reward, 0.0).reshape(-1, self.num_envs).sum(axis=0)
                self._policy_return[pid] += per_env
                self._policy_part[pid] |= stream.ts_active.reshape(-1, self.num_envs).any(axis=0)
                self._episode_return += per_env
        self._episode_length += moved
        end = mts.episode_end
        if np.count_nonzero(end):
            self._end_episodes(mts, end)
        if not self.single_agent:
            unseen = False if mts.stepped is None else self._starting & ~mts.stepped
            self._starting = np.array(end, dtype=bool) | unseen

    def _start_episodes(self, starting: np.ndarray) -> None:
        ev = self.evaluator
        slots = np.flatnonzero(starting)
        first_id = self._next_episode_id
        self._next_episode_id += len(slots)
        self._episode_ids[slots] = np.arange(first_id, first_id + len(slots))
        self._episode_return[slots] = 0.0
        self._episode_length[slots] = 0
        if not self.single_agent:
            for returns in self._policy_return.values():
                returns[slots] = 0.0
            for part in self._policy_part.values():
                part[slots] = False
        # Episode objects only for hooks (user_data lives from start to end); without any, a
        # running episode is a marker, and its summary is built at the end (CartPole with 8 envs
        # starts an episode every few steps: a dataclass each was a tenth of the sampling time)
        on_start = ev._hooked("on_episode_start")
        if not (on_start or ev._hooked("on_episode_end")):
            self._running.update(dict.fromkeys(slots.tolist()))
            return
        for k, i in enumerate(slots.tolist()):
            episode = Episode(env_id=i, episode_id=first_id + k, worker_index=ev.worker_index)
            self._running[i] = episode
            if on_start:
                hooks_mod.call(ev.hooks, "on_episode_start", worker=ev, episode=episode)

    def _end_episodes(self, mts: MultiAgentTimeStep, end: np.ndarray) -> None:
        ev = self.evaluator
        on_end = ev._hooked("on_episode_end")
        for i in np.flatnonzero(end).tolist():
            episode = self._running.pop(i, _NOT_RUNNING)
            if episode is _NOT_RUNNING:
                continue  # started before a reset() or restore: its start was not seen
            env_return, wrapped_return = float(self._episode_return[i]), None
            if self.single_agent:
                terminated = bool(mts.steps[OneAgentEnv.AGENT].discount[i] == 0)
                reported = reported_env_return(mts.steps[OneAgentEnv.AGENT].info, i)
                if reported is not None:  # the env's own return, beneath wrappers that change rewards
                    env_return, wrapped_return = reported, env_return
            else:
                discounts = [mts.steps[a].discount[i] for a in self.possible_agents if mts.active[a][i]]
                terminated = bool(discounts) and all(d == 0 for d in discounts)
            if episode is None:  # no episode hooks: the summary straight away
                summary = {
                    "env_id": i,
                    "episode_id": int(self._episode_ids[i]),
                    "worker_index": ev.worker_index,
                    "episode_return": env_return,
                    "length": int(self._episode_length[i]),
                    "terminated": terminated,
                    "truncated": not terminated,
                    "custom_metrics": {},
                }
                if wrapped_return is not None:
                    summary["wrapped_return"] = wrapped_return
            else:
                episode.episode_return, episode.wrapped_return = env_return, wrapped_return
                episode.length = int(self._episode_length[i])
                episode.terminated, episode.truncated = terminated, not terminated
                if on_end:
                    episode.last_info = self._last_info(mts, i)
                    hooks_mod.call(ev.hooks, "on_episode_end", worker=ev, episode=episode)
                summary = episode.summary()
            if not (self.single_agent or self.env.one_agent):  # one policy: its returns are the env's
                summary["policy_returns"] = {
                    pid: float(r[i]) for pid, r in self._policy_return.items() if self._policy_part[pid][i]
                }
            ev._finished.append(summary)

    def _last_info(self, mts: MultiAgentTimeStep, env: int) -> dict[str, Any]:
        """``episode.last_info``: the env's info row (single-agent), or ``{agent: its info row}`` for the
        agents that have a step at the end of a multi-agent episode (their own info, not the others')."""
        if self.single_agent:
            return env_info_row(mts.steps[OneAgentEnv.AGENT].info, env)
        return {
            agent: env_info_row(mts.steps[agent].info, env)
            for agent in self.possible_agents
            if mts.active[agent][env]
        }

    def _act(
        self, explore: bool, advance_state: bool = True, record: bool = True
    ) -> tuple[dict[str, Any], dict[str, tuple[dict[str, np.ndarray], np.ndarray]]]:
        """Every policy's actions for its active slots: the per-agent action dict for ``env.step``,
        and per policy the row of this step (columns ``[S, ...]``) and its ``active`` mask."""
        env_actions: dict[str, Any] = {}
        rows = {}
        n = self.num_envs
        for pid, stream in self.streams.items():
            collector, ts, active = stream.collector, stream.ts, stream.ts_active
            if self.single_agent:  # through the evaluator's _act (tests and tools wrap it)
                if advance_state:
                    actions, extras = self.evaluator._act(ts, explore)
                else:
                    actions, extras = self.evaluator._act(ts, explore, advance_state=False)
            elif active.all():  # every slot acts: no gathering, no scattering
                actions, extras = collector.act(ts, explore=explore, advance_state=advance_state)
            else:
                actions, extras = self._act_on_active(stream, explore, advance_state)
            if self.takes_actions:
                actions, extras = _with_taken(ts, actions, extras)
            if record:  # a single-agent env's rows are all active
                rows[pid] = (
                    self._row(stream, ts, active, actions, extras),
                    None if self.single_agent else active,
                )
            if self.single_agent:
                env_actions[OneAgentEnv.AGENT] = collector.env_actions(actions)
                continue
            for a_index, agent in enumerate(stream.slots.agents):
                env_actions[agent] = collector.env_actions(actions[a_index * n : (a_index + 1) * n])
        return env_actions, rows

    def _act_on_active(
        self, stream: PolicyStream, explore: bool, advance_state: bool
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions of the active slots only, scattered into ``[S, ...]`` (zeros where inactive)."""
        collector, ts, active = stream.collector, stream.ts, stream.ts_active
        num_slots = stream.slots.num_slots
        slots = np.flatnonzero(active)
        actions = np.zeros((num_slots, *np.shape(ts.prev_action)[1:]), ts.prev_action.dtype)
        extras: dict[str, np.ndarray] = {}
        if slots.size:
            sub_actions, sub_extras = collector.act(
                take_rows(ts, slots), explore=explore, advance_state=advance_state, slots=slots
            )
            sub_actions = np.asarray(sub_actions)
            if actions.dtype != sub_actions.dtype or actions.shape[1:] != sub_actions.shape[1:]:
                actions = np.zeros((num_slots, *sub_actions.shape[1:]), sub_actions.dtype)
            actions[slots] = sub_actions
            for key, value in sub_extras.items():
                value = np.asarray(value)
                full = np.zeros((num_slots, *value.shape[1:]), value.dtype)
                full[slots] = value
                extras[key] = full
        return actions, extras

    def _row(
        self,
        stream: PolicyStream,
        ts: TimeStep,
        active: np.ndarray,
        actions: np.ndarray,
        extras: dict[str, np.ndarray],
    ) -> dict[str, np.ndarray]:
        """The columns of one step of a policy's slots (references: recording copies them)."""
        if self.single_agent:  # the agent's step index and episode id are the env's
            eps_id, t = self._episode_ids, self._episode_length
        else:
            first = active & (ts.step_type == _FIRST)
            stream.t[first] = 0
            # unique per (episode, agent) within this evaluator: sequences never join two agents
            eps_id = self._episode_ids[stream.slots.env_of_slot] * len(self.possible_agents)
            eps_id += stream.slots.agent_of_slot
            t = stream.t.copy()
            stream.t += active & (ts.step_type != _LAST)
            if stream.state is not None:
                extras = {**extras, STATE: stream.state}
        row = {
            SampleBatch.OBS: ts.observation,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: ts.reward,
            SampleBatch.DISCOUNTS: ts.discount,
            SampleBatch.STEP_TYPES: ts.step_type,
            SampleBatch.PREV_ACTIONS: ts.prev_action,
            SampleBatch.EPS_ID: eps_id,
            SampleBatch.T: t,
            **extras,
        }
        if ts.action_mask is not None:  # the mask this row's action was chosen under (losses use it)
            row[SampleBatch.ACTION_MASK] = ts.action_mask
        return row

    def step(self, explore: bool = True, record: bool = True) -> None:
        """One env step; ``record`` adds its rows to the fragment being recorded."""
        env_actions, rows = self._act(explore, record=record)
        if record:
            for pid, (row, active) in rows.items():
                stream = self.streams[pid]
                stream.add(row, active, stream.ts.valid)
            if self.recorder is not None:
                self.recorder.act(env_actions[OneAgentEnv.AGENT], next(iter(rows.values()))[0])
        self._observe(self.env.step(env_actions))

    # --- fragments --------------------------------------------------------------------
    def record(self, fragment_length: int) -> dict[str, dict[str, Any]]:
        """Steps ``fragment_length`` times, recording every row; per policy its window (see
        :meth:`_window`): what :meth:`cut` compacts and postprocesses."""
        capacity = fragment_length + self.bootstrap_row
        for stream in self.streams.values():
            stream.start_fragment(capacity)
        for _ in range(fragment_length):
            self.step()
        if self.bootstrap_row:  # the current step, acted on but not stepped: recorded again next time
            _, rows = self._act(True, advance_state=False)
            for pid, (row, active) in rows.items():
                stream = self.streams[pid]
                stream.add(row, active, stream.ts.valid)
        return {pid: self._window(stream) for pid, stream in self.streams.items()}

    def cut(self, window: dict[str, dict[str, Any]]) -> dict[str, SampleBatch]:
        """Each policy's training rows of the windows :meth:`record` gave. A postprocess function with
        a ``window_columns(window, possible_agents, policies)`` attribute (mappo's critic input) adds
        columns to every policy's window first: rows of all policies at the same env steps."""
        add_columns = getattr(self.postprocess_fn, "window_columns", None)
        if add_columns is not None:
            policies = {pid: stream.collector.policy for pid, stream in self.streams.items()}
            add_columns(window, self.possible_agents, policies)
        return {pid: self._cut(stream, window) for pid, stream in self.streams.items()}

    def sample(self, fragment_length: int) -> MultiAgentBatch:
        """``fragment_length`` env steps; each policy's rows compacted per agent and postprocessed."""
        ev = self.evaluator
        env_steps_before, agent_steps_before = ev._env_steps, self.agent_steps
        batches = self.cut(self.record(fragment_length))
        return MultiAgentBatch(
            batches,
            env_steps=ev._env_steps - env_steps_before,
            agent_steps=self.agent_steps - agent_steps_before,
        )

    def sample_episodes(self, min_agent_steps: int) -> MultiAgentBatch:
        """Whole agent episodes (FIRST..LAST), stepping until they hold ``min_agent_steps`` agent steps.

        An agent's rows are kept per slot until its LAST; an episode that began before a reset
        (or before a restore), or whose rows became invalid (an external client dropped), is dropped.
        Rows of episodes still running stay for the next call. A policy none of whose agents
        finished an episode has no entry in the batch. Each episode is postprocessed on its own
        (``[T_e, 1]`` time-major).
        """
        ev = self.evaluator
        if getattr(self.postprocess_fn, "window_columns", None) is not None:
            raise UnsupportedError(
                "workers.batch_mode: complete_episodes: this algorithm builds columns (mappo: the critic "
                "input) from all agents' rows of each fragment, which whole episodes do not have; use "
                "truncate_episodes"
            )
        if not self.single_agent and ev._hooked("on_postprocess_fragment"):
            raise UnsupportedError(
                "workers.batch_mode: complete_episodes: the on_postprocess_fragment hook (the "
                "centralised critic) sees fragments of truncate_episodes only; use truncate_episodes"
            )
        env_steps_before, agent_steps_before = ev._env_steps, self.agent_steps
        pieces: dict[str, list[SampleBatch]] = {pid: [] for pid in self.streams}
        steps = 0
        while steps < min_agent_steps:
            env_actions, rows = self._act(True)
            if self.recorder is not None:  # before _take_episodes completes the row in place
                self.recorder.act(env_actions[OneAgentEnv.AGENT], next(iter(rows.values()))[0])
            for pid, (row, active) in rows.items():
                stream = self.streams[pid]
                steps += self._take_episodes(stream, row, active, stream.ts.valid, pieces[pid])
            self._observe(self.env.step(env_actions))
        batches = {pid: SampleBatch.concat(p) for pid, p in pieces.items() if p}
        return MultiAgentBatch(
            batches,
            env_steps=ev._env_steps - env_steps_before,
            agent_steps=self.agent_steps - agent_steps_before,
        )

    def _take_episodes(
        self,
        stream: PolicyStream,
        row: dict[str, np.ndarray],
        active: np.ndarray | None,
        valid: np.ndarray | None,
        out: list[SampleBatch],
    ) -> int:
        """Moves a step's row into each active slot's episode; postprocesses the episodes that
        ended (into ``out``); returns the agent steps they hold."""
        collector = stream.collector
        collector.policy.finish_fragment(row)  # now: the weights may change before the episode ends
        _merge_taken_logp(row)
        step_types = row[SampleBatch.STEP_TYPES]
        steps = 0
        for slot in range(len(step_types)) if active is None else np.flatnonzero(active):
            if valid is not None and not valid[slot]:
                # no env step here; an episode still collecting was aborted: discard it
                dropped, stream.partial[slot] = stream.partial[slot], []
                self.evaluator._env_steps -= sum(int(r[SampleBatch.STEP_TYPES] != _FIRST) for r in dropped)
                continue
            if step_types[slot] == _FIRST:
                stream.partial[slot] = []
            stream.partial[slot].append({key: np.array(values[slot]) for key, values in row.items()})
            if step_types[slot] != _LAST:
                continue
            episode, stream.partial[slot] = stream.partial[slot], []
            if episode[0][SampleBatch.STEP_TYPES] != _FIRST:
                continue  # began before a reset: incomplete, dropped
            fragment = SampleBatch({key: np.stack([r[key] for r in episode])[:, None] for key in episode[0]})
            rows = self.postprocess_fn(fragment, collector.policy, collector.config)
            if collector.policy.recurrent and not getattr(self.postprocess_fn, "makes_own_sequences", False):
                rows = chop_into_sequences(rows, collector.policy.max_seq_len)
            out.append(rows)
            steps += len(episode) - 1
        return steps

    def _window(self, stream: PolicyStream) -> dict[str, Any]:
        """The policy's ``[T', S]`` table of this fragment: the row carried per slot (when any slot
        has one), then the recorded rows; ``valid`` says where a slot has a row (its agent was active).
        Rows an external env marked invalid are turned into LAST rows here, with the episodes they abort."""
        n = stream.n
        table = {key: values[:n] if n < values.shape[0] else values for key, values in stream.buffers.items()}
        stream.collector.policy.finish_fragment(table)  # the columns the policy left out while acting
        _merge_taken_logp(table)
        active = stream.active[:n]
        invalid = stream.valid[:n] if stream.valid is not None else None
        if stream.has_carry.any():
            for key, carry in stream.carry.items():
                if key not in table:
                    table[key] = np.zeros((n, *carry.shape), carry.dtype)
            for key, values in table.items():
                carry = stream.carry.get(key)
                if carry is None:
                    carry = np.zeros(values.shape[1:], values.dtype)
                table[key] = np.concatenate([carry[None].astype(values.dtype), values])
            valid = np.concatenate([stream.has_carry[None], active])
            if invalid is not None:
                invalid = np.concatenate([np.ones_like(invalid[:1]), invalid])
        else:
            valid = active.copy() if not stream.all_active else np.ones_like(active)
        if invalid is not None:
            self.evaluator._env_steps -= drop_invalid_rows(table, invalid)
        stream.buffers, stream.n = {}, 0
        return {
            "rows": table,
            "valid": valid,
            "agents": list(stream.slots.agents),
            "num_envs": self.num_envs,
            "recorded": n,  # the fragment's own rows: the last n (a carried row comes first)
            "bootstrap_active": active[-1].copy() if self.bootstrap_row and n else None,
        }

    def _cut(self, stream: PolicyStream, window: dict[str, dict[str, Any]]) -> SampleBatch:
        """The policy's training rows of this fragment (see the module docstring)."""
        pid = stream.collector.policy_id
        own = window[pid]
        table, valid = own["rows"], own["valid"]
        num_slots = valid.shape[1]
        # the row each slot carries into the next fragment: its last, unless it is recorded again
        # there (the bootstrap row of a slot active at the cut, with bootstrap_row)
        carried = (
            np.ones(num_slots, dtype=bool) if own["bootstrap_active"] is None else ~own["bootstrap_active"]
        )
        if valid.all():  # every slot has every row (one agent, or all acting): nothing to compact
            counts = np.full(num_slots, valid.shape[0])
            if carried.any():
                stream.carry = {key: values[-1].copy() for key, values in table.items()}
            pieces_of = [(valid.shape[0], np.arange(num_slots), None)]
        else:
            counts = valid.sum(axis=0)
            order = np.argsort(~valid, axis=0, kind="stable")  # each slot's valid rows first, in time order
            last_rows = order[np.maximum(counts - 1, 0), np.arange(num_slots)]
            pieces_of = [(n, np.flatnonzero(counts == n), order) for n in np.unique(counts)]
            if carried.any():
                stream.carry = {key: values[last_rows, np.arange(num_slots)] for key, values in table.items()}
        stream.has_carry = carried & (counts > 0)
        pieces = []
        collector = stream.collector
        ev = self.evaluator
        for n, columns, order in pieces_of:
            if n < 2:  # one row: the bootstrap of nothing; it is carried on
                continue
            if order is None:
                rows, fragment = None, SampleBatch(dict(table))
            else:
                rows = order[:n, columns]  # [n, k]
                fragment = SampleBatch({key: values[rows, columns[None, :]] for key, values in table.items()})
            if ev._hooked("on_postprocess_fragment"):
                if rows is None:
                    rows = np.broadcast_to(np.arange(n)[:, None], (n, num_slots))
                hooks_mod.call(
                    ev.hooks,
                    "on_postprocess_fragment",
                    worker=ev,
                    policy_id=pid,
                    fragment=fragment,
                    window=window,
                    rows=rows,
                    slots=columns,
                )
            pieces.append(self.postprocess_fn(fragment, collector.policy, collector.config))
        if not pieces:
            return _empty_like(table)
        rows_out = SampleBatch.concat(pieces)
        if collector.policy.recurrent and not getattr(self.postprocess_fn, "makes_own_sequences", False):
            rows_out = chop_into_sequences(rows_out, collector.policy.max_seq_len)
        return rows_out


__all__ = ["OneAgentEnv", "Sampler", "check_policy_spaces", "drop_invalid_rows"]


def __getattr__(name: str) -> Any:
    if name == "MultiAgentSampler":  # its name until 0.3, from the special case it was written for
        import warnings

        warnings.warn(
            "rlgear.sampling.sampler.MultiAgentSampler is now Sampler (a single-agent env is its one-agent "
            "case); the old name works until rlgear 0.4",
            DeprecationWarning,
            stacklevel=2,
        )
        return Sampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
