"""Offline learning: BC clones a scripted CartPole expert; MARWIL beats BC where the data's actions
are half good, half bad and only the returns tell them apart.

Budgets (2 CPU cores): BC 3 x 200 gradient steps on 10 expert episodes (~10 s); MARWIL and BC
8 x 250 gradient steps on 300 episodes of a behaviour policy that takes the expert's action or
its opposite with equal probability (~30 s each). Greedy evaluation episodes in CartPole-v1.
"""

from __future__ import annotations

import pytest

from rlgear.discovery import registry
from tests.offline_data import expert_action, record_cartpole, use_data

pytestmark = pytest.mark.slow


def train(tmp_path, algorithm, iterations, steps, **training):
    raw = {
        "algorithm": algorithm,
        "seed": 1,
        "env": {"name": "CartPole-v1"},
        "offline": {"input": "tests/in-memory-v0"},
        "training": {
            "num_gradient_steps_per_iteration": steps,
            "lr": 1e-3,
            "evaluation_episodes": 5,
            **training,
        },
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    trainer = registry.load_algorithm(algorithm)(raw)
    try:
        return [trainer.train()["evaluation/episode_return_mean"] for _ in range(iterations)]
    finally:
        trainer.stop()


def test_bc_reaches_the_expert_return(tmp_path, monkeypatch):
    data = record_cartpole(lambda obs, rng: expert_action(obs), episodes=10, seed=0)
    assert data.total_steps == 10 * 500  # the expert keeps the pole up for every episode
    use_data(monkeypatch, data)
    returns = train(tmp_path, "bc", iterations=3, steps=200)
    assert returns[-1] >= 475, returns


def test_marwil_learns_from_returns_where_bc_cannot(tmp_path, monkeypatch):
    def half_good(obs, rng):
        good = expert_action(obs)
        return good if rng.random() < 0.5 else 1 - good

    use_data(monkeypatch, record_cartpole(half_good, episodes=300, seed=0))
    marwil = train(tmp_path, "marwil", iterations=8, steps=250, beta=1.0,
                   moving_average_sqd_adv_norm_update_rate=1e-3)  # fmt: skip
    bc = train(tmp_path, "bc", iterations=8, steps=250)
    assert max(marwil) >= 150, marwil
    assert max(bc) < 60, bc


# Discrete CQL and IQL on the same half-good data as MARWIL above, where BC stays below 60.
# Budgets: 4 x 500 gradient steps each (~30 s each on 2 loaded cores); seeds fixed (1).
def half_good_data(monkeypatch):
    def half_good(obs, rng):
        good = expert_action(obs)
        return good if rng.random() < 0.5 else 1 - good

    use_data(monkeypatch, record_cartpole(half_good, episodes=300, seed=0))


def test_discrete_cql_learns_from_returns_where_bc_cannot(tmp_path, monkeypatch):
    half_good_data(monkeypatch)
    returns = train(tmp_path, "discrete_cql", iterations=4, steps=500, target_network_update_freq=100)
    assert max(returns) >= 150, returns


def test_discrete_iql_learns_from_returns_where_bc_cannot(tmp_path, monkeypatch):
    half_good_data(monkeypatch)
    returns = train(tmp_path, "iql", iterations=4, steps=500, tau=0.01)
    assert max(returns) >= 150, returns
