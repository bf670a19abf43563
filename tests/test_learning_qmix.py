"""qmix and vdn on the two-step game of Rashid et al. 2018 (QMIX, Sec. 6.1, Fig. 3).

The game is :func:`tests.qmix_envs.make_two_step`: agent ``a``'s first action picks state 2A (every
joint action pays 7) or 2B (payoff ``[[0, 1], [1, 8]]``). Trained with uniform exploration
(epsilon 1 throughout, so every joint action is replayed equally often), QMIX's monotonic mixer
represents 2B's payoff and its greedy policy earns the optimum, 8; VDN's additive values fit 2B's
payoff by least squares, which values the joint action (1, 1) at 4.5 + 4.5 - 2.5 = 6.5 < 7, so its
greedy policy goes to 2A and earns 7, its best representable policy, as in the paper.

Measured with seed 0 (seeds 1 and 2 in brackets): the greedy return settles for good (stays at
its final value at every later iteration up to 6k env steps) at 2.5k env steps for qmix on torch
(2.6k, 1.6k) and 3.4k on TF (4.1k, 3.1k); vdn settles at 7 at 1.1k on torch (1.1k, 1.2k) and 1.2k
on TF (1.3k, 1.1k). The budgets below are those of seed 0 with ~30% margin.

A second task has a global state the mixer reads: mappo's hidden-bonus task (see its test below).
"""

from __future__ import annotations

import pytest

from rlgear.discovery import registry
from rlgear.sampling.agent_groups import AgentGroups
from tests.conftest import needs_tf
from tests.qmix_envs import make_two_step

pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def two_step_config(algorithm: str, backend: str) -> dict:
    return {
        "algorithm": algorithm,
        "backend": backend,
        "seed": 0,
        "env": {"adapter": "vector", "name": "tests.qmix_envs:make_two_step"},
        "workers": {"num_envs_per_worker": 8, "batch_mode": "complete_episodes"},
        "training": {
            "env_steps_per_training_step": 16,
            "train_batch_size": 32,
            "training_intensity": 2.0,
            "learning_starts": 200,
            "epsilon_initial": 1.0,
            "epsilon_final": 1.0,
            "target_network_update_freq": 200,
            "max_episode_len": 2,
            "buffer_size": 500,
        },
        "logging": {"tensorboard": False, "progress": "none"},
    }


def greedy_return(policy) -> float:
    """The team's return of one greedy episode (the game is deterministic)."""
    env = AgentGroups(make_two_step(1))
    timestep, state, total = env.reset(), policy.get_initial_state(1), 0.0
    for _ in range(2):
        actions, state, _ = policy.compute_actions(timestep, state, explore=False)
        timestep = env.step(actions)
        total += float(timestep.reward[0])
    return total


def train_for(algorithm: str, backend: str, budget: int) -> tuple[float, dict]:
    trainer = registry.load_algorithm(algorithm)(two_step_config(algorithm, backend))
    try:
        while True:
            result = trainer.train()
            if result["timesteps_total"] >= budget:
                return greedy_return(trainer.policy), result
    finally:
        trainer.stop()


@pytest.mark.slow
def test_qmix_reaches_the_optimal_return_8_of_the_two_step_game_within_3300_env_steps():
    """1.8 s measured."""
    greedy, result = train_for("qmix", "torch", 3300)
    assert greedy == 8.0, result


@pytest.mark.slow
def test_vdn_settles_for_7_on_the_two_step_game_within_1500_env_steps():
    """0.7 s measured."""
    greedy, result = train_for("vdn", "torch", 1500)
    assert greedy == 7.0, result


@pytest.mark.slow
@needs_tf
def test_qmix_on_tf_reaches_the_optimal_return_8_of_the_two_step_game_within_4500_env_steps():
    """11 s measured (TF's import included)."""
    greedy, result = train_for("qmix", "tf", 4500)
    assert greedy == 8.0, result


@pytest.mark.slow
@needs_tf
def test_vdn_on_tf_settles_for_7_on_the_two_step_game_within_1600_env_steps():
    """2 s measured."""
    greedy, result = train_for("vdn", "tf", 1600)
    assert greedy == 7.0, result


# --- a cooperative task with a global state ---------------------------------------------------
HIDDEN_BONUS_TARGET = 20.0


def hidden_bonus_greedy_return(policy, episodes: int = 64) -> float:
    """The mean team return of greedy episodes on fresh draws of the task."""
    from tests.mappo_envs import make_hidden_bonus

    env = AgentGroups(make_hidden_bonus(episodes, seed_offset=123))
    timestep, state, total = env.reset(seed=123), policy.get_initial_state(episodes), 0.0
    for _ in range(8):
        actions, state, _ = policy.compute_actions(timestep, state, explore=False)
        timestep = env.step(actions)
        total += float(timestep.reward.mean())
    return total


def train_hidden_bonus(backend: str, budget: int) -> tuple[float, dict]:
    config = {
        "algorithm": "qmix",
        "backend": backend,
        "seed": 0,
        "env": {"adapter": "vector", "name": "tests.mappo_envs:make_hidden_bonus"},
        "workers": {
            "num_envs_per_worker": 8,
            "batch_mode": "complete_episodes",
            "rollout_fragment_length": 8,
        },
        "training": {
            "env_steps_per_training_step": 64,
            "train_batch_size": 32,
            "training_intensity": 2.0,
            "learning_starts": 500,
            "epsilon_timesteps": 4000,
            "target_network_update_freq": 400,
            "max_episode_len": 8,
            "buffer_size": 1000,
            "lr": 0.001,
            "gamma": 0.9,
        },
        "logging": {"tensorboard": False, "progress": "none"},
    }
    trainer = registry.load_algorithm("qmix")(config)
    try:
        while True:
            result = trainer.train()
            if result["timesteps_total"] >= budget:
                return hidden_bonus_greedy_return(trainer.policy), result
    finally:
        trainer.stop()


@pytest.mark.slow
def test_qmix_reaches_20_on_the_hidden_bonus_task_within_1300_env_steps():
    """mappo's learning task (:func:`tests.mappo_envs.make_hidden_bonus`: two agents must both pick
    their privately observed target; the shared reward is a bonus in {0, 1, 3} seen only in the
    global state, which the mixer reads). Optimum 21.3 per episode (summed over the agents), random
    play 1.33. Measured with seed 0: the greedy return (64 fresh episodes) stays at 20 or above
    from 0.96k env steps on torch and 1.66k on TF (on torch it is 21.25, this draw's optimum, at
    every iteration from 2.24k on). 3.3 s measured."""
    greedy, result = train_hidden_bonus("torch", 1300)
    assert greedy >= HIDDEN_BONUS_TARGET, result


@pytest.mark.slow
@needs_tf
def test_qmix_on_tf_reaches_20_on_the_hidden_bonus_task_within_2200_env_steps():
    """See the torch test; 26 s measured (TF's import included)."""
    greedy, result = train_hidden_bonus("tf", 2200)
    assert greedy >= HIDDEN_BONUS_TARGET, result
