"""Learning tests: RND and ICM solve the hard-exploration chain where the same algorithm without them does not.

``rlgear/DeepChain-v0`` with 20 steps: a uniform random policy reaches the only reward once in
2**20 episodes. The issue's claim, for each algorithm: with ``exploration: {name: rnd}`` (or icm) greedy
evaluation reaches the end (return 1: the env is deterministic, so one greedy episode is the
success rate, 0 or 1) within the budget; with the same config, seed and budget without it, it does
not. The configs (``configs/{dqn,ppo}-rnd-deepchain.yaml``) say where their numbers come from.

Measured (torch, 2 cores shared with other busy jobs): dqn+rnd seeds 0/1/2 solved at 5.1k/5.0k/5.1k
env steps (14-19 s); plain dqn never in 10k (18 s). ppo+rnd seeds 0/1/2 solved at 7.6k/6.0k/7.5k
env steps (8-10 s); plain ppo never in 20k (20 s).
"""

from __future__ import annotations

from typing import Any

import pytest

from rlgear.plugins.algorithms.dqn import DQN
from rlgear.plugins.algorithms.ppo import PPO
from tests.conftest import CONFIGS, needs_tf

pytest.importorskip("torch")


def train(trainer_cls: type, config_name: str, budget: int, *overrides: str) -> tuple[float, int]:
    """The best greedy evaluation return within ``budget`` env steps, and the env steps when first reached."""
    from rlgear import config as config_mod

    config = config_mod.load(
        CONFIGS / config_name,
        [
            "logging.tensorboard=false",
            "logging.progress=none",
            "seed=0",
            f"stop={{evaluation/episode_return_mean: 1.0, timesteps_total: {budget}}}",
            *overrides,
        ],
        training_class=trainer_cls.config_class,
    )
    trainer = trainer_cls(config)
    best: tuple[float, int] = (-1.0, 0)
    try:
        while True:
            result: dict[str, Any] = trainer.train()
            value = result["evaluation/episode_return_mean"]
            if value > best[0]:
                best = (value, result["timesteps_total"])
            if value >= 1.0 or result["timesteps_total"] >= budget:
                return best
    finally:
        trainer.stop()


@pytest.mark.slow
def test_dqn_with_rnd_solves_deep_chain_within_10k_env_steps():
    """Budget: 10k env steps (measured: 5.1k, about 15 s)."""
    value, steps = train(DQN, "dqn-rnd-deepchain.yaml", 10_000)
    assert value == 1.0 and steps <= 10_000 + 1_000


@pytest.mark.slow
def test_dqn_without_exploration_does_not_solve_deep_chain_within_20k_env_steps():
    """The same config and seed with ``exploration: null``, over the longer (icm's) budget."""
    value, _ = train(DQN, "dqn-rnd-deepchain.yaml", 20_000, "exploration=null")
    assert value == 0.0


@pytest.mark.slow
def test_dqn_with_icm_solves_deep_chain_within_20k_env_steps():
    """Budget: 20k env steps (measured: 13.1k; seed 1: 8.0k)."""
    value, steps = train(DQN, "dqn-icm-deepchain.yaml", 20_000)
    assert value == 1.0 and steps <= 20_000 + 1_000


@pytest.mark.slow
def test_ppo_with_icm_solves_deep_chain_within_20k_env_steps():
    """Budget: 20k env steps (measured: 5.9k; seed 1: 2.9k); plain ppo: the test above."""
    value, steps = train(PPO, "ppo-icm-deepchain.yaml", 20_000)
    assert value == 1.0 and steps <= 20_000 + 1_100


@pytest.mark.slow
@needs_tf
def test_ppo_with_icm_solves_deep_chain_within_20k_env_steps_on_tf():
    """The TF module and policy."""
    value, steps = train(PPO, "ppo-icm-deepchain.yaml", 20_000, "backend=tf")
    assert value == 1.0 and steps <= 20_000 + 1_100


@pytest.mark.slow
def test_ppo_with_rnd_solves_deep_chain_within_20k_env_steps():
    """Budget: 20k env steps (measured: 7.6k, about 10 s)."""
    value, steps = train(PPO, "ppo-rnd-deepchain.yaml", 20_000)
    assert value == 1.0 and steps <= 20_000 + 1_100


@pytest.mark.slow
def test_ppo_without_rnd_does_not_solve_deep_chain_within_20k_env_steps():
    """The same config, seed and budget with ``exploration: null`` (about 20 s)."""
    value, _ = train(PPO, "ppo-rnd-deepchain.yaml", 20_000, "exploration=null")
    assert value == 0.0


@pytest.mark.slow
@needs_tf
def test_ppo_with_rnd_solves_deep_chain_within_20k_env_steps_on_tf():
    """The TF module and policy (measured: 6.1k env steps, about 25 s with TF's start-up)."""
    value, steps = train(PPO, "ppo-rnd-deepchain.yaml", 20_000, "backend=tf")
    assert value == 1.0 and steps <= 20_000 + 1_100


# --- the other algorithms the plugins declare: qrdqn and iqn (reward mode), trpo (value mode) -------
# qrdqn and iqn run the dqn configs with ``algorithm`` swapped (their keys are the DQN family's).
# Measured (torch, seeds 0/1/2): qrdqn+rnd 7.0k/6.0k/6.0k env steps (about 22 s), iqn+icm
# 9.1k/7.0k/11.1k (about 14 s); plain qrdqn and iqn solved nothing in 20k (seed 0; qrdqn's is tested).


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algorithm", "config_name", "budget"),
    [("qrdqn", "dqn-rnd-deepchain.yaml", 10_000), ("iqn", "dqn-icm-deepchain.yaml", 20_000)],
)
def test_the_dqn_family_with_exploration_solves_deep_chain_where_it_does_not_alone(
    algorithm, config_name, budget
):
    from rlgear.discovery import registry

    trainer_cls = registry.load_algorithm(algorithm)
    value, steps = train(trainer_cls, config_name, budget, f"algorithm={algorithm}")
    assert value == 1.0 and steps <= budget + 1_000
    # One negative stands for the family: iqn's (20k steps) cost 17 s of CI for the same news.
    if algorithm == "qrdqn":
        value, _ = train(trainer_cls, config_name, budget, f"algorithm={algorithm}", "exploration=null")
        assert value == 0.0


@pytest.mark.slow
def test_trpo_with_rnd_or_icm_solves_deep_chain_where_plain_trpo_does_not_within_20k_env_steps():
    """Value mode on TRPO's advantages (measured, seed 0: rnd 2.9k, icm 4.4k env steps; a few s each)."""
    from rlgear.plugins.algorithms.trpo import TRPO

    for config_name in ("trpo-rnd-deepchain.yaml", "trpo-icm-deepchain.yaml"):
        value, steps = train(TRPO, config_name, 20_000)
        assert value == 1.0 and steps <= 20_000 + 1_100, config_name
    value, _ = train(TRPO, "trpo-rnd-deepchain.yaml", 20_000, "exploration=null")
    assert value == 0.0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algorithm", "config_name"), [("appo", "appo-rnd-deepchain.yaml"), ("impala", "appo-icm-deepchain.yaml")]
)
def test_the_vtrace_family_with_exploration_solves_deep_chain_where_it_does_not_alone(algorithm, config_name):
    """Reward mode on V-trace, seed 1, 100k env steps (measured: appo+rnd 29k, impala+icm 41k env
    steps, a few s each; plain appo and impala: none in 100k, seeds 0-2)."""
    from rlgear.discovery import registry

    trainer_cls = registry.load_algorithm(algorithm)
    overrides = (f"algorithm={algorithm}", "seed=1")
    value, steps = train(trainer_cls, config_name, 100_000, *overrides)
    assert value == 1.0 and steps <= 100_000 + 1_500
    value, _ = train(trainer_cls, config_name, 100_000, *overrides, "exploration=null")
    assert value == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("config_name", ["ppo-rnd-deepchain.yaml", "ppo-icm-deepchain.yaml"])
def test_a_recurrent_ppo_with_exploration_solves_deep_chain_within_20k_env_steps(config_name):
    """``model.lstm: true``: the plugins score observations, so the policy's memory changes nothing for
    them (measured, seed 0: rnd 5.9k, icm 7.3k env steps; the LSTM without a plugin: none in 20k)."""
    value, steps = train(PPO, config_name, 20_000, "model.lstm=true")
    assert value == 1.0 and steps <= 20_000 + 1_100


@pytest.mark.slow
@needs_tf
def test_trpo_with_icm_solves_deep_chain_within_20k_env_steps_on_tf():
    """The TF policy's natural-gradient step with ICM's value mode (measured: 7.3k env steps)."""
    from rlgear.plugins.algorithms.trpo import TRPO

    value, steps = train(TRPO, "trpo-icm-deepchain.yaml", 20_000, "backend=tf")
    assert value == 1.0 and steps <= 20_000 + 1_100
