"""Checks plugin authors run in their own tests.

``check_vector_env(env)`` steps a :class:`~rlgear.env.VectorEnv` with random
valid actions and asserts the TimeStep contract, with messages that say which
rule broke at which step and env::

    from rlgear.testing import check_vector_env

    def test_my_env_follows_the_contract():
        check_vector_env(MyAdapter().make("my-env", 4, kwargs={}), steps=500)

``check_multi_agent_env(env)`` does the same for a
:class:`~rlgear.env.MultiAgentVectorEnv` (PettingZoo's envs ...), rule by rule of the
:class:`~rlgear.env.MultiAgentTimeStep` table, per env slot and agent.

``assert_plugin_ok(name)`` runs every check of ``rlgear plugins --check NAME``
on an installed plugin (any kind) and fails with the broken rules and their
fixes; ``check_plugin(name)`` returns the report instead::

    from rlgear.testing import assert_plugin_ok

    def test_my_algorithm_keeps_its_contract():  # after pip install -e .
        assert_plugin_ok("my_algo", kind="algorithm")
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from rlgear.discovery.check import CheckReport, Finding, check_plugin
from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv, VectorEnv
from rlgear.preprocessing import ACTION_MASK_KEY, batch_size
from rlgear.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple, flat_action_dim, flatten_action
from rlgear.timestep import StepType, TimeStep

__all__ = [
    "CheckReport", "ContractError", "Finding", "assert_plugin_ok", "check_multi_agent_env", "check_plugin",
    "check_vector_env", "random_actions", "random_multi_agent_actions",
]  # fmt: skip


class ContractError(AssertionError):
    """A VectorEnv broke the TimeStep contract (or a MultiAgentVectorEnv the MultiAgentTimeStep one)."""


def assert_plugin_ok(
    name: str, kind: str | None = None, *, env_name: str | None = None, backend: str | None = None
) -> CheckReport:
    """Check the installed plugin ``name`` (see :func:`check_plugin`); raise AssertionError listing the failures.

    Returns the report when every check holds (its findings say what was checked).
    """
    report = check_plugin(name, kind, env_name=env_name, backend=backend)
    if not report.ok:
        raise AssertionError(report.describe_failures())
    return report


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ContractError(message)


def _check_shapes(env: VectorEnv, ts: TimeStep, where: str) -> None:
    n = env.num_envs
    for field in ("step_type", "reward", "discount", "env_id"):
        _expect(
            np.shape(getattr(ts, field)) == (n,),
            f"{where}: {field} has shape {np.shape(getattr(ts, field))}, expected ({n},)",
        )
    if isinstance(env.observation_space, Dict | Tuple):
        _expect(
            batch_size(ts.observation) == n,
            f"{where}: the observation's arrays must have {n} rows (one per env)",
        )
    else:
        obs_shape = (n, *env.observation_space.shape)
        _expect(
            np.shape(ts.observation) == obs_shape,
            f"{where}: observation has shape {np.shape(ts.observation)}, expected {obs_shape}",
        )
    space = env.action_space
    action_shape = (n, flat_action_dim(space)) if isinstance(space, Dict | Tuple) else (n, *space.shape)
    _expect(
        np.shape(ts.prev_action) == action_shape,
        f"{where}: prev_action has shape {np.shape(ts.prev_action)}, expected {action_shape}",
    )
    _expect(np.array_equal(ts.env_id, np.arange(n)), f"{where}: env_id should be 0..{n - 1}, got {ts.env_id}")
    _expect(bool(np.all(np.isfinite(ts.reward))), f"{where}: non-finite reward {ts.reward}")
    _expect(bool(np.isin(ts.step_type, list(StepType)).all()), f"{where}: unknown step_type {ts.step_type}")


def random_actions(env: VectorEnv, rng: np.random.Generator) -> Any:
    """A batch of random actions of ``env.action_space`` (a tuple/dict of batches for Tuple/Dict)."""
    return _random_actions(env.action_space, env.num_envs, rng)


def _random_actions(space: Any, n: int, rng: np.random.Generator) -> Any:
    if isinstance(space, Discrete):
        return rng.integers(0, space.n, size=n)
    if isinstance(space, MultiDiscrete):
        return rng.integers(0, np.array(space.nvec), size=(n, len(space.nvec)))
    if isinstance(space, Tuple):
        return tuple(_random_actions(part, n, rng) for part in space.spaces)
    if isinstance(space, Dict):
        return {key: _random_actions(part, n, rng) for key, part in space.items()}
    assert isinstance(space, Box), f"no random actions for {space!r}"
    low = np.where(np.isfinite(space.low), space.low, -1.0)
    high = np.where(np.isfinite(space.high), space.high, 1.0)
    return rng.uniform(low, high, size=(n, *space.shape)).astype(space.dtype)


def _same_observations(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return set(a) == set(b) and all(_same_observations(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same_observations(x, y) for x, y in zip(a, b, strict=True))
    return bool(np.allclose(a, b))


def check_vector_env(env: VectorEnv, steps: int = 300, seed: int = 0, close: bool = True) -> dict[str, int]:
    """Step ``env`` with random actions and check every TimeStep rule; returns counts seen.

    Checked: shapes; reset gives FIRST, reward 0, discount 1, zero prev_action;
    a FIRST comes only after a reset or a LAST, and the step after a LAST is a
    FIRST with reward 0 and zero prev_action; discount is 1 except at LAST,
    where it is 0 (terminated) or 1 (truncated); prev_action is the action
    sent; the same reset seed gives the same first observations.
    """
    rng = np.random.default_rng(seed)
    counts = {"steps": 0, "episodes_terminated": 0, "episodes_truncated": 0}
    try:
        ts = env.reset(seed=seed)
        first_obs = copy.deepcopy(ts.observation)
        _check_shapes(env, ts, "reset()")
        _expect(
            bool((ts.step_type == StepType.FIRST).all()),
            f"reset(): every env must be FIRST, got {ts.step_type}",
        )
        _expect(bool((ts.reward == 0).all()), f"reset(): reward must be 0 at FIRST, got {ts.reward}")
        _expect(bool((ts.discount == 1).all()), f"reset(): discount must be 1 at FIRST, got {ts.discount}")
        _expect(
            not np.any(ts.prev_action), f"reset(): prev_action must be zeros at FIRST, got {ts.prev_action}"
        )
        for step in range(1, steps + 1):
            actions = random_actions(env, rng)
            previous = ts
            ts = env.step(actions)
            where = f"step {step}"
            _check_shapes(env, ts, where)
            was_last = previous.step_type == StepType.LAST
            first = ts.step_type == StepType.FIRST
            last = ts.step_type == StepType.LAST
            for i in np.flatnonzero(was_last & ~first):
                raise ContractError(
                    f"{where}, env {i}: the step after a LAST must be FIRST, got {StepType(int(ts.step_type[i])).name}"
                )
            for i in np.flatnonzero(first & ~was_last):
                raise ContractError(
                    f"{where}, env {i}: FIRST without a LAST before it (episodes must end with LAST)"
                )
            _expect(
                bool((ts.reward[first] == 0).all()),
                f"{where}: reward must be 0 at FIRST, got {ts.reward[first]}",
            )
            _expect(not np.any(ts.prev_action[first]), f"{where}: prev_action must be zeros at FIRST")
            _expect(
                bool((ts.discount[~last] == 1).all()),
                f"{where}: discount must be 1 except at LAST, got {ts.discount}",
            )
            _expect(
                bool(np.isin(ts.discount[last], (0.0, 1.0)).all()),
                f"{where}: discount at LAST must be 0 or 1, got {ts.discount[last]}",
            )
            moved = ~first
            _expect(
                np.allclose(
                    np.asarray(ts.prev_action)[moved], flatten_action(env.action_space, actions)[moved]
                ),
                f"{where}: prev_action must be the action just sent",
            )
            counts["steps"] += int(moved.sum())
            counts["episodes_terminated"] += int((last & (ts.discount == 0)).sum())
            counts["episodes_truncated"] += int((last & (ts.discount == 1)).sum())
        again = env.reset(seed=seed)
        _expect(
            _same_observations(again.observation, first_obs),
            "reset(seed) twice with the same seed gave different observations",
        )
    finally:
        if close:
            env.close()
    return counts


def random_multi_agent_actions(
    env: MultiAgentVectorEnv, timestep: MultiAgentTimeStep, rng: np.random.Generator
) -> dict[str, Any]:
    """Random actions for every agent of ``env`` over its slots, legal where the observation masks them.

    An agent whose observation is a Dict with an ``action_mask`` (PettingZoo classic games) gets,
    in the slots where it is active, a uniform pick among the actions its mask allows; rows where
    it is inactive get any valid action (they are ignored).
    """
    actions: dict[str, Any] = {}
    for agent in env.possible_agents:
        space = env.action_spaces[agent]
        batch = _random_actions(space, env.num_envs, rng)
        observation = timestep.steps[agent].observation
        if isinstance(space, Discrete) and isinstance(observation, dict) and ACTION_MASK_KEY in observation:
            masks = np.asarray(observation[ACTION_MASK_KEY]).astype(bool)
            for row in np.flatnonzero(timestep.active[agent]):
                allowed = np.flatnonzero(masks[row])
                if allowed.size:
                    batch[row] = rng.choice(allowed)
        actions[agent] = batch
    return actions


def _check_state(env: MultiAgentVectorEnv, ts: MultiAgentTimeStep, where: str) -> None:
    """The optional global state: given with every step exactly when the env has a ``state_space``."""
    space = getattr(env, "state_space", None)
    state = getattr(ts, "state", None)
    if space is None:
        _expect(
            state is None, f"{where}: state is set but the env's state_space is None (set both or neither)"
        )
        return
    _expect(state is not None, f"{where}: the env has a state_space but the step's state is None")
    expected = (env.num_envs, *space.shape)
    _expect(np.shape(state) == expected, f"{where}: state must have shape {expected}, got {np.shape(state)}")


def _check_agent_shapes(env: MultiAgentVectorEnv, ts: MultiAgentTimeStep, where: str) -> None:
    n = env.num_envs
    _expect(
        isinstance(ts, MultiAgentTimeStep), f"{where}: expected a MultiAgentTimeStep, got {type(ts).__name__}"
    )
    _expect(
        np.shape(ts.episode_end) == (n,) and np.asarray(ts.episode_end).dtype == bool,
        f"{where}: episode_end must be bool with shape ({n},), got {np.asarray(ts.episode_end).dtype} "
        f"{np.shape(ts.episode_end)}",
    )
    _check_state(env, ts, where)
    for agent in env.possible_agents:
        _expect(
            agent in ts.steps, f"{where}: steps has no TimeStep for agent {agent!r} (every possible agent)"
        )
        _expect(agent in ts.active, f"{where}: active has no mask for agent {agent!r} (every possible agent)")
        active = ts.active[agent]
        _expect(
            np.shape(active) == (n,) and np.asarray(active).dtype == bool,
            f"{where}: active[{agent!r}] must be bool with shape ({n},), got {np.asarray(active).dtype} "
            f"{np.shape(active)}",
        )
        view = _AgentView(n, env.observation_spaces[agent], env.action_spaces[agent])
        _check_shapes(view, ts.steps[agent], f"{where}, agent {agent}")  # type: ignore[arg-type]
        step = ts.steps[agent]
        idle = ~active
        _expect(
            bool((step.step_type[idle] == StepType.LAST).all()),
            f"{where}, agent {agent}: rows where it is inactive must have step_type LAST (the convention), "
            f"got {step.step_type[idle]}",
        )


class _AgentView:
    """One agent's spaces as a VectorEnv-shaped object, so the single-agent shape checks apply."""

    def __init__(self, num_envs: int, observation_space: Any, action_space: Any) -> None:
        self.num_envs = num_envs
        self.observation_space = observation_space
        self.action_space = action_space


#: Where one agent of one env slot is in its episode, for check_multi_agent_env.
_ABSENT, _GOING, _FINISHED = 0, 1, 2


def check_multi_agent_env(
    env: MultiAgentVectorEnv, steps: int = 300, seed: int = 0, close: bool = True
) -> dict[str, int]:
    """Step ``env`` with random (mask-legal) actions and check every rule of the MultiAgentTimeStep table.

    Checked, per env slot and agent (see :class:`rlgear.env.MultiAgentTimeStep`): shapes per agent;
    inactive rows have step_type LAST; reset gives every slot at least one active agent, all FIRST;
    an agent's first step of an episode is FIRST with reward 0, discount 1 and zero prev_action, and
    it gets no other FIRST in that episode; later steps are MID (discount 1) or LAST (discount 0 or
    1); prev_action is the action the agent was sent at its previous step; after its LAST an agent
    is inactive until the episode ends; ``episode_end`` only when no agent of the slot is still
    going; at the slot's next step the agents present get FIRST; a returned step is not changed by
    later steps; the same reset seed gives the same first observations; the optional global
    ``state`` is given with every step, shaped ``[num_envs, *state_space.shape]``, exactly when the env
    has a ``state_space``. Returns counts seen.
    """
    rng = np.random.default_rng(seed)
    counts = {"env_steps": 0, "agent_steps": 0, "episodes": 0, "agents_terminated": 0, "agents_truncated": 0}
    n = env.num_envs
    agents = tuple(env.possible_agents)
    try:
        ts = env.reset(seed=seed)
        where = "reset()"
        _check_agent_shapes(env, ts, where)
        first_obs = copy.deepcopy({agent: ts.steps[agent].observation for agent in agents})
        first_active = {agent: ts.active[agent].copy() for agent in agents}
        _expect(
            not ts.episode_end.any(), f"{where}: episode_end must be False at reset, got {ts.episode_end}"
        )
        status = {agent: np.full(n, _ABSENT, dtype=np.int8) for agent in agents}
        sent = {agent: np.zeros_like(ts.steps[agent].prev_action) for agent in agents}
        _check_agent_steps(env, ts, status, sent, where, counts, resetting=np.ones(n, dtype=bool))
        for step in range(1, steps + 1):
            actions = random_multi_agent_actions(env, ts, rng)
            previous, kept = ts, _snapshot(ts)
            resetting = previous.episode_end.copy()
            for agent in agents:
                flat = flatten_action(env.action_spaces[agent], actions[agent])
                acting = previous.active[agent] & (status[agent] == _GOING)
                sent[agent][acting] = flat[acting]
            ts = env.step(actions)
            where = f"step {step}"
            _check_agent_shapes(env, ts, where)
            _expect(
                _snapshot(previous) == kept,
                f"{where}: the step changed the arrays of the MultiAgentTimeStep returned before it "
                "(each step must own its arrays)",
            )
            counts["env_steps"] += int((~resetting).sum())
            _check_agent_steps(env, ts, status, sent, where, counts, resetting)
        again = env.reset(seed=seed)
        for agent in agents:
            _expect(
                np.array_equal(again.active[agent], first_active[agent])
                and _same_observations(
                    _rows(again.steps[agent].observation, first_active[agent]),
                    _rows(first_obs[agent], first_active[agent]),
                ),
                f"reset(seed) twice with the same seed gave different first observations (agent {agent})",
            )
    finally:
        if close:
            env.close()
    return counts


def _snapshot(ts: MultiAgentTimeStep) -> list[bytes]:
    """The bytes of the step's scalar arrays, to see whether a later step wrote into them."""
    out = [np.asarray(ts.episode_end).tobytes()]
    for agent in sorted(ts.steps):
        step = ts.steps[agent]
        out += [
            np.asarray(a).tobytes() for a in (ts.active[agent], step.step_type, step.reward, step.discount)
        ]
    return out


def _rows(observation: Any, rows: np.ndarray) -> Any:
    if isinstance(observation, dict):
        return {key: _rows(value, rows) for key, value in observation.items()}
    if isinstance(observation, tuple):
        return tuple(_rows(value, rows) for value in observation)
    return np.asarray(observation)[rows]


def _check_agent_steps(
    env: MultiAgentVectorEnv,
    ts: MultiAgentTimeStep,
    status: dict[str, np.ndarray],
    sent: dict[str, np.ndarray],
    where: str,
    counts: dict[str, int],
    resetting: np.ndarray,
) -> None:
    """Advance each (slot, agent) through absent -> going -> finished, refusing every broken rule.

    ``resetting`` marks the slots whose previous step ended the episode (or all, at reset): their
    agents start afresh and the active ones must all be FIRST.
    """
    for agent in env.possible_agents:
        status[agent][resetting] = _ABSENT
    for row in np.flatnonzero(resetting) if not getattr(env, "idle_slots", False) else ():
        if not any(ts.active[agent][row] for agent in env.possible_agents):
            raise ContractError(
                f"{where}, env {row}: no agent is active at the step after the episode's end (the agents "
                "present at the reset must get FIRST)"
                if where != "reset()"
                else f"{where}, env {row}: no agent is active (the agents present at the start must get FIRST)"
            )
    for agent in env.possible_agents:
        step, active, state = ts.steps[agent], ts.active[agent], status[agent]
        first = step.step_type == StepType.FIRST
        last = step.step_type == StepType.LAST
        label = f"{where}, env {{row}}, agent {agent}"
        for row in np.flatnonzero(active & resetting & ~first):
            raise ContractError(
                label.format(row=row) + ": the agents present at the reset must get FIRST, got "
                f"{StepType(int(step.step_type[row])).name}"
            )
        for row in np.flatnonzero(active & (state == _FINISHED)):
            raise ContractError(
                label.format(row=row) + ": active after its LAST before the episode ended (an agent's step "
                "after its LAST is inactive until the env's next episode)"
            )
        for row in np.flatnonzero(active & (state == _ABSENT) & ~first):
            raise ContractError(
                label.format(row=row) + f": its first step of the episode must be FIRST, got "
                f"{StepType(int(step.step_type[row])).name}"
            )
        for row in np.flatnonzero(active & (state == _GOING) & first):
            raise ContractError(
                label.format(row=row) + ": FIRST again within an episode (it already had one)"
            )
        joining = active & first
        for row in np.flatnonzero(joining & (step.reward != 0)):
            raise ContractError(
                label.format(row=row) + f": reward must be 0 at FIRST, got {step.reward[row]}"
            )
        for row in np.flatnonzero(joining & (step.discount != 1)):
            raise ContractError(
                label.format(row=row) + f": discount must be 1 at FIRST, got {step.discount[row]}"
            )
        for row in np.flatnonzero(joining):
            _expect(
                not np.any(step.prev_action[row]),
                label.format(row=row) + f": prev_action must be zeros at FIRST, got {step.prev_action[row]}",
            )
        mid = active & (step.step_type == StepType.MID)
        for row in np.flatnonzero(mid & (step.discount != 1)):
            raise ContractError(
                label.format(row=row)
                + f": discount must be 1 except at LAST, got {step.discount[row]} at MID"
            )
        ending = active & last
        for row in np.flatnonzero(ending & ~np.isin(step.discount, (0.0, 1.0))):
            raise ContractError(
                label.format(row=row) + f": discount at LAST must be 0 (terminated) or 1 (truncated), got "
                f"{step.discount[row]}"
            )
        continuing = active & ~first
        for row in np.flatnonzero(continuing):
            _expect(
                np.allclose(np.asarray(step.prev_action[row], dtype=np.float64), sent[agent][row]),
                label.format(row=row)
                + f": prev_action must be the action the agent was sent at its previous "
                f"step, {sent[agent][row]}, got {step.prev_action[row]}",
            )
        _expect(
            bool(np.isfinite(step.reward[active]).all()),
            f"{where}, agent {agent}: non-finite reward {step.reward[active]}",
        )
        state[joining] = _GOING
        state[ending] = _FINISHED
        counts["agent_steps"] += int(continuing.sum())
        counts["agents_terminated"] += int((ending & (step.discount == 0)).sum())
        counts["agents_truncated"] += int((ending & (step.discount == 1)).sum())
    for row in np.flatnonzero(ts.episode_end):
        going = [agent for agent in env.possible_agents if status[agent][row] == _GOING]
        _expect(
            not going,
            f"{where}, env {row}: episode_end while agent(s) {going} are still going (every agent that "
            "took part must have had its LAST by the step that ends the episode)",
        )
        counts["episodes"] += 1
