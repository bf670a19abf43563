"""Env factories of ``bench/marl.py`` (rlgear's pettingzoo adapter builds them from ``env.name``
``_marl_envs:<factory>``, with ``bench/`` on ``sys.path``).

:func:`simple_tag_fixed_prey` is mpe2's ``simple_tag_v3`` with the good agent(s) (the prey) played by a
fixed policy, uniformly random actions from a seeded generator (discrete or, with
``continuous_actions: true``, uniform in the Box), and hidden from the learner: the learner
sees the adversaries (the predators) only, a team of equal observation and action spaces, so
qmix/vdn can group it and one shared policy fits every agent. The global ``state()`` stays the
underlying env's (every agent's observation, the prey's included).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo.utils.env import ParallelEnv


class FixedPolicyAgents(ParallelEnv):
    """A ParallelEnv exposing ``learners`` only; every other agent acts uniformly at random."""

    def __init__(self, env: ParallelEnv, learners: list[str]) -> None:
        self.env = env
        self.metadata = getattr(env, "metadata", {})
        self.possible_agents = list(learners)
        self.fixed = [a for a in env.possible_agents if a not in learners]
        self.agents: list[str] = []
        self.rng = np.random.default_rng()
        self.render_mode = getattr(env, "render_mode", None)

    def observation_space(self, agent: str) -> Any:
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> Any:
        return self.env.action_space(agent)

    @property
    def state_space(self) -> Any:
        return self.env.state_space

    def state(self) -> np.ndarray:
        return self.env.state()

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed + 7919)  # the prey's actions: seeded with the env
            for agent in self.fixed:
                self.env.action_space(agent).seed(seed)
        obs, infos = self.env.reset(seed=seed, options=options)
        self.agents = [a for a in self.env.agents if a in self.possible_agents]
        return {a: obs[a] for a in self.agents}, {a: infos.get(a, {}) for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        joint = dict(actions)
        for agent in self.fixed:
            if agent in self.env.agents:
                space = self.env.action_space(agent)
                if hasattr(space, "n"):
                    joint[agent] = int(self.rng.integers(space.n))
                else:  # the continuous-action variant: uniform in the Box
                    joint[agent] = self.rng.uniform(space.low, space.high).astype(space.dtype)
        obs, rewards, terms, truncs, infos = self.env.step(joint)
        keep = [a for a in obs if a in self.possible_agents]
        self.agents = [a for a in self.env.agents if a in self.possible_agents]
        return (
            {a: obs[a] for a in keep},
            {a: rewards[a] for a in keep},
            {a: terms[a] for a in keep},
            {a: truncs[a] for a in keep},
            {a: infos.get(a, {}) for a in keep},
        )

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def simple_tag_fixed_prey(**kwargs: Any) -> FixedPolicyAgents:
    """mpe2 simple_tag_v3; the adversaries learn, the good agent(s) act uniformly at random."""
    from mpe2 import simple_tag_v3

    env = simple_tag_v3.parallel_env(**kwargs)
    return FixedPolicyAgents(env, [a for a in env.possible_agents if a.startswith("adversary")])
