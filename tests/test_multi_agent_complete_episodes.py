"""``workers.batch_mode: complete_episodes`` on multi-agent envs: batches of whole agent episodes.

Each agent's rows are kept until its own LAST (it may finish before the env's episode ends, or
join after it began); only episodes that run from the agent's FIRST to its LAST are trained on.
Checked with pg without a baseline (Monte-Carlo returns, which need whole episodes). The
learning test is ``slow`` (time in its docstring).
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import UnsupportedError
from rlgear.sample_batch import MultiAgentBatch
from rlgear.sample_batch import SampleBatch as SB
from rlgear.sampling.rollout_worker import RolloutWorker
from tests.multi_agent_envs import LateJoinEnv
from tests.test_multi_agent import MATCH_OPTIMUM, OtherAgentObservation, independent, ma_config

pytest.importorskip("torch")


def pg_config(env="make_late_join", **sections) -> dict:
    raw = ma_config(env, **sections)
    raw["algorithm"] = "pg"
    raw["workers"]["batch_mode"] = "complete_episodes"
    raw["training"] = {"use_baseline": False, "train_batch_size": 32, **sections.get("training", {})}
    return raw


def reference_returns(agent: str, actions: list[int], gamma: float) -> list[float]:
    """The late-join env's rewards, from its definition: agent ``a`` acts at env steps 0..3
    (terminated at 3), ``b`` at 2..5 (truncated at 5); the reward of arriving at env step ``k`` is
    ``0.5 k + (agent index + 1) + the agent's previous action``. ``actions`` are the agent's actions
    at its trained steps (all but its LAST); returns are Monte-Carlo, nothing bootstrapped."""
    index, first = (0, 0) if agent == "a" else (1, LateJoinEnv.B_FIRST)
    rewards = [0.5 * (first + t + 1) + index + 1 + action for t, action in enumerate(actions)]
    out, running = [], 0.0
    for reward in reversed(rewards):
        running = reward + gamma * running
        out.append(running)
    return out[::-1]


def test_batches_hold_whole_agent_episodes_with_their_monte_carlo_returns():
    gamma = 0.9
    raw = pg_config(
        workers={"num_envs_per_worker": 2, "rollout_fragment_length": 5}, training={"gamma": gamma}
    )
    config = config_mod.resolve(raw, training_class=registry.load_algorithm("pg").config_class)
    algo = registry.load_algorithm("pg")
    evaluator = RolloutWorker(
        config, algo.policy_class("torch"), registry.load_env_adapter("vector"), algo.postprocess
    )
    try:
        episodes: dict[int, list[tuple[int, int, float]]] = {}
        for _ in range(4):
            batch, env_steps = evaluator.sample_with_count()
            assert isinstance(batch, MultiAgentBatch) and env_steps == batch.env_steps
            rows = batch["default"]
            assert len(rows) >= 10  # at least a fragment's worth of agent steps: 5 x 2
            for n in range(len(rows)):
                eps = int(rows[SB.EPS_ID][n])
                episodes.setdefault(eps, []).append(
                    (int(rows[SB.T][n]), int(rows[SB.ACTIONS][n]), float(rows[SB.VALUE_TARGETS][n]))
                )
    finally:
        evaluator.stop()
    assert len(episodes) >= 8
    for eps, rows in episodes.items():
        agent = "ab"[eps % 2]  # episode ids are (env episode) * agents + agent index
        # whole: the agent's steps 0..2 (3 trained steps; its LAST is not trained), each once
        assert sorted(t for t, _, _ in rows) == [0, 1, 2], (eps, agent, rows)
        rows.sort()
        expected = reference_returns(agent, [action for _, action, _ in rows], gamma)
        np.testing.assert_allclose([g for _, _, g in rows], expected, rtol=1e-5, err_msg=f"{agent} {eps}")


def test_each_policy_gets_only_its_own_agents_whole_episodes():
    raw = pg_config(multiagent=independent(policies_to_train=["pb"]))
    trainer = registry.load_algorithm("pg")(raw)
    try:
        before = trainer.policy_map["pa"].get_weights()
        batch, _ = trainer.workers.local_worker.sample_with_count()
        assert set(batch) == {"pa", "pb"}
        assert (batch["pa"][SB.EPS_ID] % 2 == 0).all() and (batch["pb"][SB.EPS_ID] % 2 == 1).all()
        result = trainer.train()
        assert any(k.startswith("learner/pb/") for k in result)
        assert not any(k.startswith("learner/pa/") for k in result)
        for key, value in before.items():
            np.testing.assert_array_equal(trainer.policy_map["pa"].get_weights()[key], value)
    finally:
        trainer.stop()


def test_the_centralised_critic_hook_is_refused_with_complete_episodes():
    trainer = registry.load_algorithm("pg")(pg_config(), hooks=[OtherAgentObservation()])
    try:
        with pytest.raises(UnsupportedError, match=r"complete_episodes: the on_postprocess_fragment hook"):
            trainer.train()
    finally:
        trainer.stop()


@pytest.mark.slow
def test_pg_without_a_baseline_on_whole_episodes_reaches_95_percent_of_the_optimum():
    """About 10 s (seed 1 reaches it at 22.8k env steps; budget 40k)."""
    raw = pg_config(
        "make_match",
        workers={"num_envs_per_worker": 8, "rollout_fragment_length": 64},
        training={"train_batch_size": 512, "lr": 3e-3},
        model={"hidden_sizes": [64]},
        seed=1,
    )
    trainer = registry.load_algorithm("pg")(raw)
    try:
        best = -np.inf
        while trainer.timesteps_total < 40_000 and best < 0.95 * MATCH_OPTIMUM:
            result = trainer.train()
            best = max(best, result["episode_return_mean"] or -np.inf)
    finally:
        trainer.stop()
    assert best >= 0.95 * MATCH_OPTIMUM, result
