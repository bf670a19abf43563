"""Agents and slots: how a policy's slots map to (agent, env slot) pairs, and the one-agent env.

A policy acts on *slots*: slot ``a * num_envs + i`` is its ``a``-th agent in env slot ``i``
(:class:`AgentSlots` gathers their per-agent TimeSteps into one batch). A single-agent env is the
one-agent case of the same machinery (:class:`OneAgentEnv`), not a loop of its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv
from rlgear.errors import ConfigError
from rlgear.timestep import StepType, TimeStep

_MID, _LAST = int(StepType.MID), int(StepType.LAST)


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


class OneAgentEnv(MultiAgentVectorEnv):
    """A single-agent :class:`~rlgear.env.VectorEnv` seen as a multi-agent env with one agent that
    acts in every slot at every step: how a single-agent run goes through :class:`Sampler`.

    The agent's TimeStep is the env's own (``valid`` and ``info`` included); its episode ends at its
    LAST. A row with ``TimeStep.valid`` False (an external client dropped) stays *active*: it is
    recorded like any row and turned into a LAST row at the fragment cut
    (:func:`~rlgear.sampling.rollout_worker.drop_invalid_rows`), as the single-agent evaluator always did.
    """

    AGENT = "agent"

    def __init__(self, env: Any):
        self.env = env
        self.num_envs = env.num_envs
        self.possible_agents = (self.AGENT,)
        self.observation_spaces = {self.AGENT: env.observation_space}
        self.action_spaces = {self.AGENT: env.action_space}
        self._active = {self.AGENT: np.ones(self.num_envs, dtype=bool)}
        self._all_mid = np.full(self.num_envs, _MID, dtype=np.int32).tobytes()  # TimeStep.step_type is int32
        self._no_end = np.zeros(self.num_envs, dtype=bool)
        self._no_end.flags.writeable = False  # shared by the steps where no episode ends

    def _wrap(self, ts: TimeStep) -> MultiAgentTimeStep:
        if ts.step_type.tobytes() == self._all_mid:  # most steps: cheaper than any comparison
            return MultiAgentTimeStep({self.AGENT: ts}, self._active, self._no_end)
        end = ts.step_type == _LAST
        if ts.valid is not None:
            end &= ts.valid
        return MultiAgentTimeStep({self.AGENT: ts}, self._active, end)

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        return self._wrap(self.env.reset(seed=seed))

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        ts = self.env.step(actions[self.AGENT])
        if ts.step_type.tobytes() == self._all_mid:  # most steps (the hot loop: no call to _wrap)
            return MultiAgentTimeStep({self.AGENT: ts}, self._active, self._no_end)
        return self._wrap(ts)

    def close(self) -> None:
        self.env.close()


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
