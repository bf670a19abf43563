"""Learning tests on PettingZoo envs (issue 13): simple_spread_v3 (cooperative, 3 agents) and
connect_four_v3 (turn-based, action masks, self-play). Fixed seeds; times measured on the shared
2-core development machine under load from another job, so CI should be faster.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import rlgear

pytest.importorskip("pettingzoo", reason="needs the pettingzoo extra: pip install 'rlgear[pettingzoo]'")

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
SB3_BASELINES = ROOT / "bench" / "results" / "multi_agent_sb3.json"
#: Moves of connect_four self-play before the games against random play (see that test).
SELF_PLAY_MOVES = 20_000


def train(tmp_path, config_name, *overrides):
    return rlgear.train(
        CONFIGS / config_name,
        overrides=[f"logging.dir={tmp_path}", "logging.tensorboard=false", *overrides],
    )


def simple_spread_target() -> float:
    """Random play's mean return plus half the gap to the best return measured in a long run.

    Both from bench/results/multi_agent_sb3.json (bench/multi_agent_sb3.py): random play over 2000
    episodes (-80.5) and the best rollout mean of SB3 PPO via SuperSuit over 1M env steps (-53.8),
    returns summed over the three agents: the target is about -67.2.
    """
    measured = json.loads(SB3_BASELINES.read_text())
    random_return = measured["random"]["mean_return"]
    best_return = measured["sb3_ppo"]["best_rollout_mean_return"]
    return random_return + 0.5 * (best_return - random_return)


@pytest.mark.slow
def test_shared_policy_ppo_closes_half_the_gap_on_simple_spread_within_60k_env_steps(tmp_path):
    """8 s measured (pytest --durations, machine lightly loaded; 40 s when loaded by two other
    jobs): seed 0 crosses the target at 15.4k env steps (1,544 env steps an iteration)."""
    pytest.importorskip("mpe2", reason="needs the pettingzoo extra (mpe2's particle envs)")
    target = simple_spread_target()
    assert -68 < target < -66  # the measured figures the docstring states
    result = train(
        tmp_path,
        "ppo-simple-spread.yaml",
        "seed=0",
        "checkpoint.every=0",
        "checkpoint.at_end=false",
        f"stop={{episode_return_mean: {target}, timesteps_total: 60000}}",
    )
    assert result["episode_return_mean"] >= target, result
    assert result["timesteps_total"] <= 60_000 + 1600
    assert result["agent_timesteps_total"] == 3 * result["timesteps_total"]


def play_against_random(policy, trained_seat: int, games: int, seed: int) -> int:
    """Games won by ``policy`` (greedy, masked) against a uniformly random legal-move player.

    Played on PettingZoo's own AEC env, not through rlgear's adapter, so the evaluation does not
    share the code under test beyond the policy. ``trained_seat`` 0 moves first. Draws are not wins.
    """
    from pettingzoo.classic import connect_four_v3

    env = connect_four_v3.env()
    rng = np.random.default_rng(seed)
    wins = 0
    for game in range(games):
        env.reset(seed=seed + game)
        trained_agent = env.possible_agents[trained_seat]
        for agent in env.agent_iter():
            observation, reward, termination, truncation, _ = env.last()
            if termination or truncation:
                if agent == trained_agent and reward > 0:
                    wins += 1
                env.step(None)
                continue
            legal = np.flatnonzero(observation["action_mask"])
            if agent == trained_agent:
                action = int(policy.compute_single_action(observation))
                assert action in legal, (action, legal)  # masked: never an illegal column
            else:
                action = int(rng.choice(legal))
            env.step(action)
    env.close()
    return wins


@pytest.mark.slow
def test_self_play_ppo_beats_a_random_player_at_connect_four(tmp_path):
    """20k moves of self-play training (a quarter of the config's 80k), then 200 greedy games
    against random play. Measured on 30 Nov 2026 (wins of 200): seed 0 won 189 after 20k moves, 185
    after 30k, 179 after 40k and 184 after the config's 80k; seeds 1, 2 and 3 won 189, 189 and 180
    after 20k. Against a random player the policy is as good at 20k moves as at 80k, and the other
    60k were CI's second-slowest test (62 s).

    One shared policy plays both seats (rather than a frozen snapshot opponent updated by an
    on_train_result hook): connect_four's observation is from the mover's side, so both seats'
    moves are the same decision problem and every move of the game is training data, while a
    snapshot opponent would halve the data and add the copy schedule as a tuning knob. Against a
    random player, a policy that learns to complete and block lines of four is enough.
    """
    result = train(
        tmp_path,
        "ppo-connect-four.yaml",
        "seed=0",
        f"stop.timesteps_total={SELF_PLAY_MOVES}",
        "checkpoint.every=0",
        "checkpoint.at_end=true",
    )
    assert result["timesteps_total"] >= SELF_PLAY_MOVES
    (run_dir,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    policy = rlgear.load(run_dir)
    wins_first = play_against_random(policy, trained_seat=0, games=100, seed=1_000)
    wins_second = play_against_random(policy, trained_seat=1, games=100, seed=2_000)
    assert wins_first + wins_second >= 180, (wins_first, wins_second)
