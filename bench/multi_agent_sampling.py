"""Multi-agent sampling throughput: agent-steps/s of the evaluator on a numpy team env vs env-steps/s
of the single-agent evaluator on the same env with one agent.

Both envs are the same numpy game (each agent sees a one-hot target in {0..3} and is rewarded for
picking it; 8-step episodes), stepped over 8 env slots through the ``vector`` env adapter, with a
PPO policy (torch, 64x64 MLP, one shared policy). Each ``sample()`` call collects a fragment of
64 env steps per slot, postprocesses it (GAE) and, for the team env, compacts it per agent. The
two alternate in rounds so that a busy machine hits both alike.

Usage: python bench/multi_agent_sampling.py [--agents 3] [--rounds 10] [--calls 5]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.env import MultiAgentTimeStep, MultiAgentVectorEnv, VectorEnv
from rlgear.sampling.rollout_worker import RolloutWorker
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep

NUM_ENVS, FRAGMENT, LENGTH = 8, 64, 8
FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


class _Game:
    """The game's state over env slots, shared by both env classes."""

    def __init__(self, num_envs: int, agents: int, seed: int = 0):
        self.n, self.agents = num_envs, agents
        self.rng = np.random.default_rng(seed)
        self.t = np.zeros(num_envs, np.int64)
        self.ended = np.zeros(num_envs, bool)
        self.target = self.rng.integers(0, 4, (agents, num_envs))

    def reset(self):
        self.t[:] = 0
        self.ended[:] = False
        self.target = self.rng.integers(0, 4, (self.agents, self.n))
        return np.full(self.n, FIRST), np.zeros((self.agents, self.n)), np.ones(self.n)

    def step(self, actions: np.ndarray):
        restart = self.ended.copy()
        reward = np.where(restart, 0.0, (actions == self.target).astype(np.float64))
        self.t += 1
        self.t[restart] = 0
        done = (self.t >= LENGTH) & ~restart
        self.ended = done
        self.target = self.rng.integers(0, 4, (self.agents, self.n))
        step_type = np.where(restart, FIRST, np.where(done, LAST, MID))
        return step_type, reward, np.where(done, 0.0, 1.0)

    def timestep(self, a: int, step_type, reward, discount, prev) -> TimeStep:
        return TimeStep(
            step_type=step_type.astype(np.int32),
            reward=reward[a].astype(np.float32),
            discount=discount.astype(np.float32),
            observation=np.eye(4, dtype=np.float32)[self.target[a]],
            prev_action=prev,
            env_id=np.arange(self.n, dtype=np.int32),
        )


class SingleAgentGame(VectorEnv):
    def __init__(self, num_envs: int):
        self.num_envs = num_envs
        self.observation_space = Box(np.zeros(4), np.ones(4))
        self.action_space = Discrete(4)
        self.game = _Game(num_envs, 1)

    def reset(self, seed=None):
        return self.game.timestep(0, *self.game.reset(), np.zeros(self.num_envs, np.int64))

    def step(self, actions):
        actions = np.asarray(actions)
        return self.game.timestep(0, *self.game.step(actions[None]), actions)


class TeamGame(MultiAgentVectorEnv):
    def __init__(self, num_envs: int, agents: int = 3):
        self.num_envs = num_envs
        self.possible_agents = tuple(f"agent_{i}" for i in range(agents))
        self.observation_spaces = {a: Box(np.zeros(4), np.ones(4)) for a in self.possible_agents}
        self.action_spaces = {a: Discrete(4) for a in self.possible_agents}
        self.game = _Game(num_envs, agents)
        self.all_active = {a: np.ones(num_envs, bool) for a in self.possible_agents}

    def _mts(self, step_type, reward, discount, prev) -> MultiAgentTimeStep:
        steps = {
            a: self.game.timestep(i, step_type, reward, discount, prev[i])
            for i, a in enumerate(self.possible_agents)
        }
        return MultiAgentTimeStep(steps=steps, active=self.all_active, episode_end=step_type == LAST)

    def reset(self, seed=None):
        return self._mts(*self.game.reset(), np.zeros((len(self.possible_agents), self.num_envs), np.int64))

    def step(self, actions):
        stacked = np.stack([np.asarray(actions[a]) for a in self.possible_agents])
        return self._mts(*self.game.step(stacked), stacked)


def make_single(num_envs: int) -> SingleAgentGame:
    return SingleAgentGame(num_envs)


def make_team(num_envs: int, agents: int = 3) -> TeamGame:
    return TeamGame(num_envs, agents)


def evaluator(factory: str, agents: int) -> RolloutWorker:
    kwargs = {"agents": agents} if factory == "make_team" else {}
    raw = {
        "algorithm": "ppo",
        "env": {"adapter": "vector", "name": f"{__name__}:{factory}", "kwargs": kwargs},
        "workers": {"num_envs_per_worker": NUM_ENVS, "rollout_fragment_length": FRAGMENT},
        "seed": 0,
    }
    config = config_mod.resolve(raw)
    algo = registry.load_algorithm("ppo")
    backend = registry.load_backend("torch")()
    backend.setup(1, 0)
    return RolloutWorker(
        config, algo.policy_class("torch"), registry.load_env_adapter("vector"), algo.postprocess
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    single, team = evaluator("make_single", 1), evaluator("make_team", args.agents)
    totals = {"single": [0, 0.0], "team": [0, 0.0]}
    ratios = []
    for _ in range(args.rounds):
        rates = {}
        for name, ev in (("single", single), ("team", team)):
            ev.pop_metrics()
            start = time.perf_counter()
            for _ in range(args.calls):
                ev.sample()
            elapsed = time.perf_counter() - start
            metrics = ev.pop_metrics()
            steps = metrics.get("agent_steps", metrics["env_steps"])
            totals[name][0] += steps
            totals[name][1] += elapsed
            rates[name] = steps / elapsed
        ratios.append(rates["team"] / rates["single"])
    single_rate = totals["single"][0] / totals["single"][1]
    team_rate = totals["team"][0] / totals["team"][1]
    print(
        json.dumps(
            {
                "single_agent_env_steps_per_s": round(single_rate),
                f"team_{args.agents}_agents_agent_steps_per_s": round(team_rate),
                "ratio": round(team_rate / single_rate, 2),
                "round_ratio_min_median_max": [
                    round(min(ratios), 2),
                    round(float(np.median(ratios)), 2),
                    round(max(ratios), 2),
                ],
            },
            indent=1,
        )
    )
    single.stop()
    team.stop()


if __name__ == "__main__":
    main()
