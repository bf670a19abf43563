"""Sampling a :class:`~rlgear.env.MultiAgentVectorEnv`: one collector per policy, one stream per agent.

Each policy's :class:`~rlgear.execution.collector.PolicyCollector` acts on its *slots*, the
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
are postprocessed, as single-agent episodes are (:meth:`MultiAgentSampler.sample_episodes`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.discovery import hooks as hooks_mod
from rlgear.env import MultiAgentTimeStep
from rlgear.errors import ConfigError, UnsupportedError
from rlgear.execution.collector import PolicyCollector, take_rows
from rlgear.execution.metrics import Episode, env_info_row
from rlgear.execution.sequences import chop_into_sequences
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
from rlgear.timestep import StepType, TimeStep

_FIRST, _LAST = int(StepType.FIRST), int(StepType.LAST)


class AgentSlots:
    """The agents a policy acts for and where their rows sit among its slots."""

    def __init__(self, agents: list[str], num_envs: int, agent_index: dict[str, int]):
        self.agents = agents
        self.num_envs = num_envs
        self.num_slots = len(agents) * num_envs
        #: Per slot: the agent's index among the env's possible agents (episode ids use it).
        self.agent_of_slot = np.repeat([agent_index[a] for a in agents], num_envs)
        self.env_of_slot = np.tile(np.arange(num_envs), len(agents))

    def gather(self, mts: MultiAgentTimeStep) -> tuple[TimeStep, np.ndarray]:
        """The policy's agents' TimeSteps concatenated over slots, and the ``active`` mask ``[S]``."""
        steps = [mts.steps[a] for a in self.agents]
        if len(steps) == 1:
            return steps[0], np.asarray(mts.active[self.agents[0]], dtype=bool)
        active = np.concatenate([mts.active[a] for a in self.agents]).astype(bool)
        observation = _concat_nests([s.observation for s in steps])
        ts = TimeStep(
            step_type=np.concatenate([s.step_type for s in steps]),
            reward=np.concatenate([s.reward for s in steps]),
            discount=np.concatenate([s.discount for s in steps]),
            observation=observation,
            prev_action=np.concatenate([s.prev_action for s in steps]),
            env_id=np.concatenate([s.env_id for s in steps]),
        )
        return ts, active


def _concat_nests(values: list[Any]) -> Any:
    first = values[0]
    if isinstance(first, dict):
        return {k: _concat_nests([v[k] for v in values]) for k in first}
    if isinstance(first, tuple | list):
        return type(first)(_concat_nests([v[i] for v in values]) for i in range(len(first)))
    return np.concatenate([np.asarray(v) for v in values])


class _PolicyStream:
    """One policy's recording: rows of the current fragment and the row carried per slot."""

    def __init__(self, collector: PolicyCollector, slots: AgentSlots):
        self.collector = collector
        self.slots = slots
        self.rows: list[dict[str, np.ndarray]] = []
        self.active: list[np.ndarray] = []
        self.carry: dict[str, np.ndarray] = {}
        self.has_carry = np.zeros(slots.num_slots, dtype=bool)
        self.t = np.zeros(slots.num_slots, dtype=np.int64)  # each agent's step index in its episode
        self.ts: TimeStep | None = None
        self.ts_active: np.ndarray | None = None
        #: complete_episodes: per slot, the rows of its agent's episode so far
        self.partial: list[list[dict[str, np.ndarray]]] = [[] for _ in range(slots.num_slots)]

    def clear(self) -> None:
        self.rows, self.active = [], []
        self.partial = [[] for _ in range(self.slots.num_slots)]
        self.carry = {}
        self.has_carry[:] = False
        self.t[:] = 0
        self.collector.reset_state()


class MultiAgentSampler:
    """The multi-agent half of an :class:`~rlgear.execution.evaluator.Evaluator` (it owns the env)."""

    def __init__(
        self,
        evaluator: Any,
        collectors: dict[str, PolicyCollector],
        agents_of_policy: dict[str, list[str]],
        postprocess_fn: Callable[..., SampleBatch],
    ):
        self.evaluator = evaluator
        env = evaluator.env
        self.env = env
        self.num_envs = env.num_envs
        self.possible_agents = tuple(env.possible_agents)
        agent_index = {a: i for i, a in enumerate(self.possible_agents)}
        self.streams = {
            pid: _PolicyStream(collectors[pid], AgentSlots(agents, self.num_envs, agent_index))
            for pid, agents in agents_of_policy.items()
        }
        self.postprocess_fn = postprocess_fn
        n = self.num_envs
        self._starting = np.ones(n, dtype=bool)  # slots whose current step is an episode's reset
        self._episode_ids = np.zeros(n, dtype=np.int64)
        self._episode_return = np.zeros(n, dtype=np.float64)
        self._policy_return = {pid: np.zeros(n, dtype=np.float64) for pid in self.streams}
        self._episode_length = np.zeros(n, dtype=np.int64)
        self._next_episode_id = 0
        self._running: dict[int, Episode] = {}
        self.agent_steps = 0

    # --- stepping -------------------------------------------------------------------
    def reset(self, seed: int | None) -> None:
        for stream in self.streams.values():
            stream.clear()
        self._running.clear()
        self._starting[:] = True
        self._observe(self.env.reset(seed=seed))

    def _observe(self, mts: MultiAgentTimeStep) -> None:
        for stream in self.streams.values():
            ts, active = stream.slots.gather(mts)
            stream.ts = stream.collector.observe(ts, valid=active)
            stream.ts_active = active
        self._track(mts)

    def _track(self, mts: MultiAgentTimeStep) -> None:
        """Episode bookkeeping per env slot: returns summed over agents, per policy, env steps."""
        ev = self.evaluator
        starting = self._starting
        for i in np.flatnonzero(starting):
            self._episode_ids[i] = self._next_episode_id
            self._next_episode_id += 1
            self._episode_return[i] = 0.0
            self._episode_length[i] = 0
            for returns in self._policy_return.values():
                returns[i] = 0.0
            episode = Episode(
                env_id=int(i), episode_id=int(self._episode_ids[i]), worker_index=ev.worker_index
            )
            self._running[int(i)] = episode
            if ev._hooked("on_episode_start"):
                hooks_mod.call(ev.hooks, "on_episode_start", worker=ev, episode=episode)
        moved = ~starting
        ev._env_steps += int(np.count_nonzero(moved))
        self._episode_length += moved
        for pid, stream in self.streams.items():
            ts, active = stream.ts, stream.ts_active
            stepped = active & (ts.step_type != _FIRST)
            self.agent_steps += int(np.count_nonzero(stepped))
            per_slot = np.where(stepped, ts.reward, 0.0)
            per_env = per_slot.reshape(-1, self.num_envs).sum(axis=0)
            self._policy_return[pid] += per_env
            self._episode_return += per_env
        end = np.asarray(mts.episode_end, dtype=bool)
        for i in np.flatnonzero(end):
            episode = self._running.pop(int(i), None)
            if episode is None:
                continue
            episode.episode_return = float(self._episode_return[i])
            episode.length = int(self._episode_length[i])
            discounts = [mts.steps[a].discount[i] for a in self.possible_agents if mts.active[a][i]]
            episode.terminated = bool(discounts) and all(d == 0 for d in discounts)
            episode.truncated = not episode.terminated
            if ev._hooked("on_episode_end"):
                first_agent = self.possible_agents[0]
                episode.last_info = env_info_row(mts.steps[first_agent].info, int(i))
                hooks_mod.call(ev.hooks, "on_episode_end", worker=ev, episode=episode)
            summary = episode.summary()
            summary["policy_returns"] = {pid: float(r[i]) for pid, r in self._policy_return.items()}
            ev._finished.append(summary)
        self._starting = end.copy()

    def _act(self, explore: bool, record: bool) -> dict[str, Any]:
        """Every policy's actions for its active slots; the per-agent action dict for ``env.step``."""
        env_actions: dict[str, Any] = {}
        for stream in self.streams.values():
            collector, ts, active = stream.collector, stream.ts, stream.ts_active
            slots = np.flatnonzero(active)
            actions = np.zeros((stream.slots.num_slots, *np.shape(ts.prev_action)[1:]), ts.prev_action.dtype)
            extras: dict[str, np.ndarray] = {}
            if slots.size:
                sub = take_rows(ts, slots) if slots.size < active.size else ts
                sub_actions, sub_extras = collector.act(sub, explore=explore, slots=slots)
                sub_actions = np.asarray(sub_actions)
                if actions.dtype != sub_actions.dtype or actions.shape[1:] != sub_actions.shape[1:]:
                    actions = np.zeros((stream.slots.num_slots, *sub_actions.shape[1:]), sub_actions.dtype)
                actions[slots] = sub_actions
                for key, value in sub_extras.items():
                    value = np.asarray(value)
                    full = np.zeros((stream.slots.num_slots, *value.shape[1:]), value.dtype)
                    full[slots] = value
                    extras[key] = full
            if record:
                self._record(stream, ts, active, actions, extras)
            n = self.num_envs
            for a_index, agent in enumerate(stream.slots.agents):
                rows = actions[a_index * n : (a_index + 1) * n]
                env_actions[agent] = collector.env_actions(rows)
        return env_actions

    def _record(
        self,
        stream: _PolicyStream,
        ts: TimeStep,
        active: np.ndarray,
        actions: np.ndarray,
        extras: dict[str, np.ndarray],
    ) -> None:
        first = active & (ts.step_type == _FIRST)
        stream.t[first] = 0
        n_agents = len(self.possible_agents)
        row = {
            SampleBatch.OBS: ts.observation,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: ts.reward,
            SampleBatch.DISCOUNTS: ts.discount,
            SampleBatch.STEP_TYPES: ts.step_type,
            SampleBatch.PREV_ACTIONS: ts.prev_action,
            # unique per (episode, agent) within this evaluator: sequences never join two agents
            SampleBatch.EPS_ID: self._episode_ids[stream.slots.env_of_slot] * n_agents
            + stream.slots.agent_of_slot,
            SampleBatch.T: stream.t.copy(),
            **extras,
        }
        if ts.action_mask is not None:
            row[SampleBatch.ACTION_MASK] = ts.action_mask
        stream.rows.append(row)
        stream.active.append(active.copy())
        stream.t += active & (ts.step_type != _LAST)

    def step(self, explore: bool = True, record: bool = True) -> None:
        env_actions = self._act(explore, record)
        self._observe(self.env.step(env_actions))

    # --- fragments --------------------------------------------------------------------
    def sample(self, fragment_length: int) -> MultiAgentBatch:
        """``fragment_length`` env steps; each policy's rows compacted per agent and postprocessed."""
        ev = self.evaluator
        env_steps_before, agent_steps_before = ev._env_steps, self.agent_steps
        for _ in range(fragment_length):
            self.step()
        window = {pid: self._window(stream) for pid, stream in self.streams.items()}
        batches = {pid: self._cut(stream, window) for pid, stream in self.streams.items()}
        return MultiAgentBatch(
            batches,
            env_steps=ev._env_steps - env_steps_before,
            agent_steps=self.agent_steps - agent_steps_before,
        )

    def sample_episodes(self, min_agent_steps: int) -> MultiAgentBatch:
        """Whole agent episodes (FIRST..LAST), stepping until they hold ``min_agent_steps`` agent steps.

        An agent's rows are kept per slot until its LAST; an episode that began before a reset
        (or before a restore) is dropped, as on a single-agent env. Rows of episodes still running
        stay for the next call. A policy none of whose agents finished an episode has no entry
        in the batch. Each episode is postprocessed on its own (``[T_e, 1]`` time-major).
        """
        ev = self.evaluator
        if ev._hooked("on_postprocess_fragment"):
            raise UnsupportedError(
                "workers.batch_mode: complete_episodes: the on_postprocess_fragment hook (the "
                "centralised critic) sees fragments of truncate_episodes only; use truncate_episodes"
            )
        env_steps_before, agent_steps_before = ev._env_steps, self.agent_steps
        pieces: dict[str, list[SampleBatch]] = {pid: [] for pid in self.streams}
        steps = 0
        while steps < min_agent_steps:
            self.step()
            for pid, stream in self.streams.items():
                steps += self._take_episodes(stream, pieces[pid])
        batches = {pid: SampleBatch.concat(p) for pid, p in pieces.items() if p}
        return MultiAgentBatch(
            batches,
            env_steps=ev._env_steps - env_steps_before,
            agent_steps=self.agent_steps - agent_steps_before,
        )

    def _take_episodes(self, stream: _PolicyStream, out: list[SampleBatch]) -> int:
        """Moves the step just recorded into each active slot's episode; postprocesses the
        episodes that ended (into ``out``); returns the agent steps they hold."""
        row, active = stream.rows.pop(), stream.active.pop()
        collector = stream.collector
        step_types = row[SampleBatch.STEP_TYPES]
        steps = 0
        for slot in np.flatnonzero(active):
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

    def _window(self, stream: _PolicyStream) -> dict[str, Any]:
        """The policy's ``[T+1, S]`` table of this fragment: row 0 the row carried per slot, then
        the recorded steps; ``valid`` says where a slot has a row (its agent was active)."""
        active = np.stack(stream.active)  # [T, S]
        keys = list(dict.fromkeys(k for row in stream.rows for k in row))
        data = {k: _stack_column(k, stream.rows, stream.carry) for k in keys}
        for key in stream.carry:
            if key not in data:
                data[key] = np.zeros((len(stream.rows), *stream.carry[key].shape), stream.carry[key].dtype)
        stream.rows, stream.active = [], []
        table = {}
        for key, values in data.items():
            carry = stream.carry.get(key)
            if carry is None:
                carry = np.zeros(values.shape[1:], values.dtype)
            table[key] = np.concatenate([carry[None].astype(values.dtype), values])
        return {
            "rows": table,
            "valid": np.concatenate([stream.has_carry[None], active]),
            "agents": list(stream.slots.agents),
            "num_envs": self.num_envs,
        }

    def _cut(self, stream: _PolicyStream, window: dict[str, dict[str, Any]]) -> SampleBatch:
        """The policy's training rows of this fragment (see the module docstring)."""
        pid = stream.collector.policy_id
        table, valid = window[pid]["rows"], window[pid]["valid"]
        counts = valid.sum(axis=0)
        order = np.argsort(~valid, axis=0, kind="stable")  # each slot's valid rows first, in time order
        has_rows = counts > 0
        last = np.maximum(counts - 1, 0)
        last_rows = order[last, np.arange(valid.shape[1])]
        stream.carry = {
            key: np.where(
                _expand(has_rows, values[0]), values[last_rows, np.arange(valid.shape[1])], values[0]
            )
            for key, values in table.items()
        }
        stream.has_carry |= has_rows
        pieces = []
        collector = stream.collector
        ev = self.evaluator
        for n in np.unique(counts):
            if n < 2:  # one row: the bootstrap of nothing; it is carried on
                continue
            columns = np.flatnonzero(counts == n)
            rows = order[:n, columns]  # [n, k]
            fragment = SampleBatch({key: values[rows, columns[None, :]] for key, values in table.items()})
            if ev._hooked("on_postprocess_fragment"):
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


def _expand(mask: np.ndarray, like: np.ndarray) -> np.ndarray:
    return mask.reshape(mask.shape + (1,) * (like.ndim - 1))


def _stack_column(key: str, rows: list[dict[str, np.ndarray]], carry: dict[str, np.ndarray]) -> np.ndarray:
    """``[T, S, ...]`` of one column; rows where the column is missing (no active slot yet) are zeros."""
    template = next((np.asarray(r[key]) for r in rows if key in r), None)
    if template is None:
        template = np.asarray(carry[key])
    out = np.zeros((len(rows), *template.shape), template.dtype)
    for t, row in enumerate(rows):
        if key in row:
            out[t] = row[key]
    return out


def _empty_like(table: dict[str, np.ndarray]) -> SampleBatch:
    return SampleBatch({key: values[:0, 0] for key, values in table.items()})


def check_policy_spaces(config: Any, agents_of_policy: dict[str, list[str]], env: Any) -> None:
    """Agents mapped to one policy must share spaces: else an error naming them and their spaces."""
    for pid, agents in agents_of_policy.items():
        for kind, spaces in (("observation", env.observation_spaces), ("action", env.action_spaces)):
            distinct = {repr(spaces[a]) for a in agents}
            if len(distinct) > 1:
                listed = "; ".join(f"{a}: {spaces[a]!r}" for a in agents)
                raise ConfigError(
                    f"{config.source}: multiagent.policy_mapping: agents mapped to policy '{pid}' have "
                    f"different {kind} spaces ({listed}); map them to separate policies"
                )
