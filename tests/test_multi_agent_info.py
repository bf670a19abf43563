"""Per-agent ``info`` on multi-agent envs: each agent's TimeStep carries its own info (gymnasium's vector
layout), and ``episode.last_info`` in ``on_episode_end`` is ``{agent: its info row}`` for the agents that
have a step when the episode ends: from the pettingzoo adapter (Parallel and AEC) and the vector adapter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.discovery.hooks import make_plugin_manager
from rlgear.sampling.metrics import env_info_row
from rlgear.sampling.rollout_worker import RolloutWorker
from tests.multi_agent_envs import MatchEnv

pytest.importorskip("torch")
pytest.importorskip("pettingzoo")

from tests.pettingzoo_envs import RelayParallelEnv, TurnsAECEnv  # after the importorskip: needs pettingzoo


class InfoRelay(RelayParallelEnv):
    """The relay env whose agents get ``{"who": agent, "t": step}`` as their info."""

    def _info(self, agent: str) -> dict[str, Any]:
        return {**super()._info(agent), "who": agent, "t": self.t}


class InfoTurns(TurnsAECEnv):
    """The turn-based env whose agents get ``{"who": agent, "t": moves so far}`` as their info."""

    def _set_infos(self) -> None:
        self.infos = {agent: {"who": agent, "t": self.t} for agent in self.agents}

    def reset(self, seed=None, options=None) -> None:
        super().reset(seed, options)
        self._set_infos()

    def step(self, action) -> None:
        super().step(action)
        self._set_infos()


class InfoMatch(MatchEnv):
    """The vector adapter's toy env, each agent's TimeStep with its own info (vector layout)."""

    def _with_info(self, mts):
        for agent, step in mts.steps.items():
            mts.steps[agent] = type(step)(
                **{
                    **step.__dict__,
                    "info": {"who": np.full(self.num_envs, agent, object), "t": self.t.copy()},
                }
            )
        return mts

    def reset(self, seed=None):
        return self._with_info(super().reset(seed))

    def step(self, actions):
        return self._with_info(super().step(actions))


def make_info_match(num_envs: int) -> InfoMatch:
    return InfoMatch(num_envs, length=4)


class LastInfos:
    def __init__(self) -> None:
        self.infos: list[dict[str, Any]] = []

    @rlgear.hookimpl
    def on_episode_end(self, worker, episode) -> None:
        self.infos.append(episode.last_info)


def episode_end_infos(adapter: str, name: str, kwargs: dict | None = None, steps: int = 3) -> list[dict]:
    raw = {
        "algorithm": "ppo",
        "env": {"adapter": adapter, "name": name, "kwargs": kwargs or {}},
        "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 10},
        "model": {"hidden_sizes": [8]},
        "seed": 0,
    }
    algo = registry.load_algorithm("ppo")
    hook = LastInfos()
    evaluator = RolloutWorker(
        config_mod.resolve(raw),
        algo.policy_class("torch"),
        registry.load_env_adapter(adapter),
        algo.postprocess,
        hooks=make_plugin_manager([hook]),
    )
    try:
        for _ in range(steps):
            evaluator.sample()
    finally:
        evaluator.stop()
    assert hook.infos
    return hook.infos


def test_the_pettingzoo_parallel_adapter_gives_each_agent_its_own_info():
    from rlgear.plugins.envs.pettingzoo_env import PettingZooAdapter

    env = PettingZooAdapter().make(f"{__name__}:InfoRelay", 2, kwargs={"mask_in_info": True})
    try:
        ts = env.reset(seed=0)
        for _ in range(3):
            ts = env.step({a: np.zeros(2, dtype=np.int64) for a in env.possible_agents})
        for agent in env.possible_agents:
            for slot in range(2):
                row = env_info_row(ts.steps[agent].info, slot)
                if ts.active[agent][slot]:  # its own info; the mask went into its observation, not here
                    assert row == {"who": agent, "t": 3}
                else:
                    assert row == {}
    finally:
        env.close()


def test_on_episode_end_sees_every_agents_info_on_a_parallel_pettingzoo_env():
    infos = episode_end_infos("pettingzoo", f"{__name__}:InfoRelay")
    # the relay truncates at step 6 with early and late still there; quitter left at step 3
    for info in infos:
        assert info == {"early": {"who": "early", "t": 6}, "late": {"who": "late", "t": 6}}


def test_on_episode_end_sees_the_agents_info_on_a_turn_based_pettingzoo_env():
    infos = episode_end_infos("pettingzoo", f"{__name__}:InfoTurns")
    # b is terminated by its 2nd move (t 4); a plays on alone and is truncated after 7 moves
    for info in infos:
        assert info == {"a": {"who": "a", "t": 7}}


def test_on_episode_end_sees_each_agents_own_info_on_a_vector_adapter_env():
    infos = episode_end_infos("vector", f"{__name__}:make_info_match")
    for info in infos:
        assert info == {"a": {"who": "a", "t": 4}, "b": {"who": "b", "t": 4}}
