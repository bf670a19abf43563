"""rlgear.testing.check_multi_agent_env catches each broken rule of the MultiAgentTimeStep table.

A hand-made MultiAgentVectorEnv plays a fixed script that follows every rule; each test plants
one violation and asserts the checker's message names it. No PettingZoo needed.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv
from rlgear.spaces import Box, Discrete
from rlgear.testing import ContractError, check_multi_agent_env
from rlgear.timestep import StepType, TimeStep

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST

#: The script of one episode, per step of a slot: {agent: (step_type, reward, discount)}; agents
#: left out are inactive. x is there from the reset and is terminated at step 2; y joins at step 1
#: and is truncated at step 3, which ends the episode; step 4 is the next episode's reset.
SCRIPT = [
    {"x": (FIRST, 0.0, 1.0)},
    {"x": (MID, 1.0, 1.0), "y": (FIRST, 0.0, 1.0)},
    {"x": (LAST, -1.0, 0.0), "y": (MID, 0.5, 1.0)},
    {"y": (LAST, 2.0, 1.0)},
]


class ScriptedEnv(MultiAgentVectorEnv):
    """``num_envs`` slots playing SCRIPT in step, with one planted ``fault`` (None: none)."""

    def __init__(self, fault: str | None = None, num_envs: int = 2) -> None:
        self.fault = fault
        self.num_envs = num_envs
        self.possible_agents = ("x", "y")
        self.observation_spaces = {
            agent: Box(np.zeros(2), np.full(2, 100.0)) for agent in self.possible_agents
        }
        self.action_spaces = {agent: Discrete(3) for agent in self.possible_agents}
        self.t = 0
        self.offset = 0.0
        self.last_sent = {agent: np.zeros(num_envs, dtype=np.int64) for agent in self.possible_agents}
        self.shared: MultiAgentTimeStep | None = None

    def reset(self, seed: int | None = None) -> MultiAgentTimeStep:
        rng = np.random.default_rng(None if self.fault == "seed" else seed)
        self.offset = float(rng.uniform())
        self.t = 0
        self.last_sent = {agent: np.zeros(self.num_envs, dtype=np.int64) for agent in self.possible_agents}
        return self._timestep(reset=True)

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentTimeStep:
        phase = self.t % len(SCRIPT)
        for agent, row in SCRIPT[phase].items():
            if row[0] != LAST:  # the agent acted at that step: its action leads to its next one
                self.last_sent[agent] = np.asarray(actions[agent], dtype=np.int64).copy()
        self.t += 1
        return self._timestep(reset=False)

    def _timestep(self, reset: bool) -> MultiAgentTimeStep:
        phase = self.t % len(SCRIPT)
        fault, n = self.fault, self.num_envs
        if fault == "shared_arrays" and self.shared is not None:
            ts = self.shared  # writes into the arrays of the step it returned before
        else:
            steps = {
                agent: TimeStep(
                    step_type=np.full(n, LAST, dtype=np.int32),
                    reward=np.zeros(n, dtype=np.float32),
                    discount=np.zeros(n, dtype=np.float32),
                    observation=np.zeros((n, 2), dtype=np.float32),
                    prev_action=np.zeros(n, dtype=np.int64),
                    env_id=np.arange(n, dtype=np.int32),
                )
                for agent in self.possible_agents
            }
            active = {agent: np.zeros(n, dtype=bool) for agent in self.possible_agents}
            ts = MultiAgentTimeStep(steps=steps, active=active, episode_end=np.zeros(n, dtype=bool))
        for agent in self.possible_agents:
            ts.active[agent][:] = False
            ts.steps[agent].step_type[:] = LAST
        for agent, (step_type, reward, discount) in SCRIPT[phase].items():
            step = ts.steps[agent]
            ts.active[agent][:] = True
            step.step_type[:] = step_type
            step.reward[:] = reward
            step.discount[:] = discount
            step.observation[:] = (self.t, self.offset)
            step.prev_action[:] = 0 if step_type == FIRST else self.last_sent[agent]
        ts.episode_end[:] = phase == len(SCRIPT) - 1
        self._plant(ts, phase, reset)
        if fault == "shared_arrays":
            self.shared = ts
        return ts

    def _plant(self, ts: MultiAgentTimeStep, phase: int, reset: bool) -> None:
        x, y, fault = ts.steps["x"], ts.steps["y"], self.fault
        if fault == "reward_shape":
            x.reward = np.zeros(self.num_envs + 1, dtype=np.float32)
        elif fault == "missing_agent":
            del ts.steps["y"]
        elif fault == "active_dtype":
            ts.active["x"] = ts.active["x"].astype(np.int8)
        elif fault == "inactive_not_last" and phase == 0:
            y.step_type[1] = MID
        elif fault == "reset_not_first" and reset:
            x.step_type[0] = MID
        elif fault == "nobody_at_reset" and reset:
            ts.active["x"][1] = False
            x.step_type[1] = LAST
        elif fault == "first_reward" and phase == 1:
            y.reward[0] = 3.0
        elif fault == "first_discount" and phase == 1:
            y.discount[0] = 0.0
        elif fault == "first_prev_action" and phase == 1:
            y.prev_action[1] = 2
        elif fault == "first_twice" and phase == 2:
            y.step_type[0] = FIRST
            y.reward[0] = 0.0
        elif fault == "join_not_first" and phase == 1:
            y.step_type[0] = MID
        elif fault == "active_after_last" and phase == 3:
            ts.active["x"][1] = True
            x.step_type[1] = MID
            x.discount[1] = 1.0
        elif fault == "mid_discount" and phase == 2:
            y.discount[1] = 0.0
        elif fault == "last_discount" and phase == 2:
            x.discount[0] = 0.5
        elif fault == "prev_action" and phase == 2:
            x.prev_action[0] = (x.prev_action[0] + 1) % 3
        elif fault == "early_episode_end" and phase == 2:
            ts.episode_end[1] = True
        elif fault == "no_first_after_end" and phase == 0 and not reset:
            x.step_type[0] = MID
        elif fault == "nonfinite_reward" and phase == 2:
            y.reward[0] = np.nan


def test_the_scripted_env_follows_every_rule():
    """The planted faults are what the checker trips on: the env without one passes."""
    counts = check_multi_agent_env(ScriptedEnv(), steps=20, seed=3)
    # 20 steps of 4-step episodes: 5 episodes per slot, x terminated and y truncated in each
    assert counts["episodes"] == 10
    assert counts["agents_terminated"] == 10 and counts["agents_truncated"] == 10
    assert counts["env_steps"] == 2 * 15  # steps that were not a reset


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("reward_shape", "reset(), agent x: reward has shape (3,), expected (2,)"),
        ("missing_agent", "steps has no TimeStep for agent 'y'"),
        ("active_dtype", "active['x'] must be bool with shape (2,)"),
        ("inactive_not_last", "agent y: rows where it is inactive must have step_type LAST"),
        (
            "reset_not_first",
            "reset(), env 0, agent x: the agents present at the reset must get FIRST, got MID",
        ),
        ("nobody_at_reset", "reset(), env 1: no agent is active"),
        ("first_reward", "step 1, env 0, agent y: reward must be 0 at FIRST, got 3.0"),
        ("first_discount", "step 1, env 0, agent y: discount must be 1 at FIRST, got 0.0"),
        ("first_prev_action", "step 1, env 1, agent y: prev_action must be zeros at FIRST"),
        ("first_twice", "step 2, env 0, agent y: FIRST again within an episode"),
        ("join_not_first", "step 1, env 0, agent y: its first step of the episode must be FIRST, got MID"),
        ("active_after_last", "step 3, env 1, agent x: active after its LAST before the episode ended"),
        ("mid_discount", "step 2, env 1, agent y: discount must be 1 except at LAST, got 0.0 at MID"),
        ("last_discount", "step 2, env 0, agent x: discount at LAST must be 0 (terminated) or 1 (truncated)"),
        ("prev_action", "step 2, env 0, agent x: prev_action must be the action the agent was sent"),
        ("early_episode_end", "step 2, env 1: episode_end while agent(s) ['y'] are still going"),
        (
            "no_first_after_end",
            "step 4, env 0, agent x: the agents present at the reset must get FIRST, got MID",
        ),
        ("nonfinite_reward", "step 2, agent y: non-finite reward"),
        ("shared_arrays", "step 1: the step changed the arrays of the MultiAgentTimeStep returned before it"),
        ("seed", "reset(seed) twice with the same seed gave different first observations (agent x)"),
    ],
)
def test_check_multi_agent_env_catches(fault, message):
    with pytest.raises(ContractError) as caught:
        check_multi_agent_env(ScriptedEnv(fault), steps=12, seed=0)
    assert message in str(caught.value)
