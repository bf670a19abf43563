"""Baselines for issue 13's simple_spread benchmark: random play, and independent PPO with SB3.

On ``mpe2``'s ``simple_spread_v3`` (3 agents, discrete actions, the default ``max_cycles=25``):

- ``random``: uniformly random actions; the mean episode return *summed over the agents*, over
  ``--random-episodes`` episodes (seeded);
- ``sb3_ppo``: Stable-Baselines3 PPO on PettingZoo through SuperSuit, the standard recipe
  (``pettingzoo_env_to_vec_env_v1`` then ``concat_vec_envs_v1``, 8 envs in this process). That
  recipe turns each agent into a slot of one SB3 vec env (8 envs x 3 agents = 24 slots) acting
  with ONE network: independent learners with *shared parameters*, not one network per agent.
  SB3 counts agent steps; an env step is 3 of them. The learning curve is the mean episode return
  summed over agents (the mean per-agent return of the episodes that ended in each rollout, times
  the number of agents: every agent of an env ends at the same step) against env steps and wall
  clock. The last points of a long run estimate "the best return" the issue's learning test needs.

The JSON is rewritten after every rollout, so an interrupted long run still leaves its curve.

Usage: nice python bench/multi_agent_sb3.py [--env-steps 300000] [--random-episodes 1000]
       [--seed 0] [--out bench/results/multi_agent_sb3.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import source_revision

NUM_ENVS = 8
MAX_CYCLES = 25


def make_parallel_env() -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=MAX_CYCLES, continuous_actions=False)


def random_baseline(episodes: int, seed: int) -> dict[str, Any]:
    """Mean (and spread) of the episode return summed over agents under uniformly random actions."""
    env = make_parallel_env()
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        for agent in env.possible_agents:
            env.action_space(agent).seed(seed * 100_003 + episode * 7 + env.possible_agents.index(agent))
        total = 0.0
        while env.agents:
            actions = {agent: env.action_space(agent).sample() for agent in env.agents}
            _, rewards, _, _, _ = env.step(actions)
            total += float(sum(rewards.values()))
        returns.append(total)
    env.close()
    return {
        "episodes": episodes,
        "mean_return": statistics.fmean(returns),
        "stdev_return": statistics.stdev(returns),
        "stderr_return": statistics.stdev(returns) / len(returns) ** 0.5,
    }


def sb3_ppo(env_steps: int, seed: int, out: Path, result: dict[str, Any]) -> dict[str, Any]:
    """Train SB3 PPO via SuperSuit for ``env_steps`` env steps; record the curve as it goes."""
    import supersuit as ss
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.common.vec_env import VecMonitor

    torch.set_num_threads(1)
    env = make_parallel_env()
    num_agents = len(env.possible_agents)
    vec = ss.pettingzoo_env_to_vec_env_v1(env)
    vec = ss.concat_vec_envs_v1(vec, NUM_ENVS, num_cpus=1, base_class="stable_baselines3")
    # SuperSuit's ConcatVecEnv has no seed() (which PPO(seed=...) calls): seed its envs through a
    # reset (env i gets seed + i), and the rest (torch, numpy, the action space) as SB3 would.
    vec.venv.reset(seed=seed)
    set_random_seed(seed)
    vec = VecMonitor(vec)
    hyper = {"learning_rate": 1e-3, "batch_size": 256, "n_steps": 256, "n_epochs": 10, "gamma": 0.99}
    model = PPO("MlpPolicy", vec, verbose=0, device="cpu", **hyper)
    curve: list[dict[str, float]] = []
    record = {
        "num_envs": NUM_ENVS,
        "agents": num_agents,
        "parameters": "shared (one network acts for every agent: SuperSuit's recipe)",
        "hyperparameters": hyper,
        "curve": curve,
    }
    result["sb3_ppo"] = record
    start = time.perf_counter()

    class Curve(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.returns: list[float] = []

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.returns.append(float(info["episode"]["r"]) * num_agents)
            return True

        def _on_rollout_end(self) -> None:
            if not self.returns:
                return
            curve.append(
                {
                    "env_steps": self.num_timesteps // num_agents,
                    "wall_s": round(time.perf_counter() - start, 2),
                    "mean_return": statistics.fmean(self.returns),
                    "episodes": len(self.returns),
                }
            )
            self.returns = []
            record["wall_s"] = curve[-1]["wall_s"]
            out.write_text(json.dumps(result, indent=2) + "\n")

    model.learn(total_timesteps=env_steps * num_agents, callback=Curve())
    record["wall_s"] = round(time.perf_counter() - start, 2)
    record["env_steps"] = model.num_timesteps // num_agents
    tail = curve[-10:]
    record["final_mean_return_last10_rollouts"] = statistics.fmean(p["mean_return"] for p in tail)
    record["best_rollout_mean_return"] = max(p["mean_return"] for p in curve)
    vec.close()
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-steps", type=int, default=300_000)
    parser.add_argument("--random-episodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/results/multi_agent_sb3.json"))
    args = parser.parse_args()
    result: dict[str, Any] = {
        "revision": source_revision(),
        "env": f"mpe2:simple_spread_v3 (max_cycles={MAX_CYCLES}, continuous_actions=False)",
        "seed": args.seed,
    }
    result["random"] = random_baseline(args.random_episodes, args.seed)
    print(f"random: {result['random']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.env_steps > 0:
        record = sb3_ppo(args.env_steps, args.seed, args.out, result)
        print(
            f"sb3_ppo: {record['env_steps']} env steps in {record['wall_s']} s, last-10-rollout mean "
            f"{record['final_mean_return_last10_rollouts']:.2f}",
            flush=True,
        )
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
