"""One training run of ``bench/suite.py`` in a fresh process: rlgear or Stable-Baselines3.

Both libraries are driven the same way: train for the task's env-step
budget on one torch thread, and every ``eval_every`` env steps pause and
play ``--eval-episodes`` greedy episodes on a separate gymnasium env with the
same seeds for both libraries (:func:`evaluate`, one shared function). The
evaluation time is measured and taken out of the wall clock, which counts
from the start of this process (imports included) to the end of training.

Prints one ``SUITE_EVAL {json}`` line per evaluation and a final
``SUITE_RESULT {json}`` line.

Differences that remain: SB3's callback runs inside rollout collection, so
an evaluation due at step k sees the policy before the update on the last
rollout (rlgear evaluates after a whole training step); both overshoot the
budget by up to one rollout.
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from suite_tasks import TASKS_BY_NAME, Task  # noqa: E402


def evaluate(act: Callable[[np.ndarray], Any], env_id: str, episodes: int, seed: int) -> dict[str, float]:
    """Greedy episodes on one fresh env; episode k is reset with seed ``10_000 + 100 * seed + k``."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns, lengths = [], []
    for k in range(episodes):
        obs, _ = env.reset(seed=10_000 + 100 * seed + k)
        total, length, done = 0.0, 0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            length += 1
            done = terminated or truncated
        returns.append(total)
        lengths.append(length)
    env.close()
    return {"return_mean": float(np.mean(returns)), "len_mean": float(np.mean(lengths))}


class Clock:
    """Evaluation time, kept apart so it can be taken out of the wall clock."""

    def __init__(self) -> None:
        self.eval_s = 0.0
        self.curve: list[dict[str, float]] = []

    def record(self, steps: int, act: Callable, task: Task, episodes: int, seed: int) -> None:
        start = time.perf_counter()
        stats = evaluate(act, task.env, episodes, seed)
        self.eval_s += time.perf_counter() - start
        point = {"env_steps": int(steps), "wall_s": self.wall_s(), **stats}
        self.curve.append(point)
        print("SUITE_EVAL " + json.dumps(point), flush=True)

    def wall_s(self) -> float:
        return time.perf_counter() - PROCESS_START - self.eval_s


def run_rlgear(task: Task, seed: int, budget: int, eval_every: int, episodes: int, clock: Clock) -> int:
    from rlgear import config as config_mod
    from rlgear.discovery import registry
    from rlgear.run.agent import LoadedPolicy

    # RLGEAR_SUITE_CONFIG: try a candidate config under the suite's exact protocol while tuning.
    config_path = os.environ.get("RLGEAR_SUITE_CONFIG") or HERE.parent / "configs" / task.rlgear_config
    raw = config_mod.read_yaml(config_path)
    raw["seed"] = seed
    raw["stop"] = {"timesteps_total": budget}
    training = raw.setdefault("training", {})
    training["evaluation_interval"] = 0  # evaluated here, the same way for both libraries
    training["min_env_steps_per_iteration"] = 0  # one training step per train(): evaluate on time
    raw["logging"] = {
        "dir": tempfile.mkdtemp(prefix="rlgear-suite-"),
        "tensorboard": False,
        "progress": "none",
    }
    trainer = registry.load_algorithm(raw["algorithm"])(raw)
    try:
        policy = LoadedPolicy(trainer.policy, trainer.config)
        normalizers = _observation_normalizers(trainer)

        def act(obs: np.ndarray) -> Any:
            for (
                rms,
                epsilon,
            ) in normalizers:  # env.wrappers_vector's NormalizeObservation, as SB3's normalize_obs
                obs = ((obs - rms.mean) / np.sqrt(rms.var + epsilon)).astype(np.float32)
            return policy.compute_single_action(obs)

        next_eval = eval_every
        while trainer.timesteps_total < budget:
            trainer.train()
            if trainer.timesteps_total >= next_eval:
                clock.record(trainer.timesteps_total, act, task, episodes, seed)
                next_eval = (trainer.timesteps_total // eval_every + 1) * eval_every
        if not clock.curve or clock.curve[-1]["env_steps"] != trainer.timesteps_total:
            clock.record(trainer.timesteps_total, act, task, episodes, seed)
        return trainer.timesteps_total
    finally:
        trainer.stop()


def _observation_normalizers(trainer: Any) -> list[tuple[Any, float]]:
    """``(running statistics, epsilon)`` of each ``NormalizeObservation`` in the run's ``env.wrappers_vector``:
    the evaluation env is a plain gymnasium env, so its observations are normalized here with the
    training env's statistics (live: they keep updating while training runs)."""
    from gymnasium.wrappers.vector import NormalizeObservation

    env = trainer.workers.local_worker.env
    wrappers = getattr(env, "vector_wrappers", [])
    return [(w.obs_rms, w.epsilon) for w in wrappers if isinstance(w, NormalizeObservation)]


def _sb3_kwargs(task: Task, budget: int) -> dict[str, Any]:
    """The zoo's entry as SB3 keyword arguments; ``{"linear": X}`` becomes SB3's schedule falling from X
    to 0 over the run, ``{"linear": X, "over": N}`` one falling to 0 over N env steps (the zoo's
    ``n_timesteps`` where the suite's budget is shorter), of which the run sees the first ``budget``."""
    kwargs = dict(task.sb3.get("kwargs", {}))
    for key, value in list(kwargs.items()):
        if isinstance(value, dict) and "linear" in value:
            start, fraction = value["linear"], budget / value.get("over", budget)
            kwargs[key] = lambda remaining, start=start, fraction=fraction: (
                start * max(0.0, 1.0 - (1.0 - remaining) * fraction)
            )
    return kwargs


def sb3_algorithm(name: str) -> Any:
    """The Stable-Baselines3 class of an rlgear algorithm name: SB3's own, or sb3-contrib's (TRPO,
    QR-DQN, TQC, CrossQ), which shares SB3's API and release numbers."""
    import stable_baselines3 as sb3

    if name in ("ppo", "a2c", "dqn", "sac", "td3"):
        return getattr(sb3, name.upper())
    import sb3_contrib

    return {
        "trpo": sb3_contrib.TRPO,
        "qrdqn": sb3_contrib.QRDQN,
        "tqc": sb3_contrib.TQC,
        "crossq": sb3_contrib.CrossQ,
    }[name]


def run_sb3(task: Task, seed: int, budget: int, eval_every: int, episodes: int, clock: Clock) -> int:
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)  # as rlgear's workers.num_cpus_for_driver: 1
    env = make_vec_env(task.env, n_envs=task.sb3.get("n_envs", 1), seed=seed)
    normalize = bool(task.sb3.get("normalize"))
    if normalize:
        env = VecNormalize(env, gamma=task.sb3.get("kwargs", {}).get("gamma", 0.99))
    algorithm = sb3_algorithm(task.algorithm)
    kwargs = _sb3_kwargs(task, budget)
    policy_kwargs = dict(kwargs.get("policy_kwargs", {}))
    if isinstance(policy_kwargs.get("activation_fn"), str):  # the zoo's nn.ReLU, kept as text in the task
        policy_kwargs["activation_fn"] = getattr(torch.nn, policy_kwargs["activation_fn"])
        kwargs["policy_kwargs"] = policy_kwargs
    noise = task.sb3.get("action_noise")
    if noise is not None:  # the zoo's noise_type: normal, noise_std (in the env's action units)
        from stable_baselines3.common.noise import NormalActionNoise

        n_actions = env.action_space.shape[-1]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n_actions), noise["normal"] * np.ones(n_actions))
    model = algorithm("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **kwargs)

    def act(obs: np.ndarray) -> Any:
        if normalize:
            obs = env.normalize_obs(obs)
        action, _ = model.predict(obs, deterministic=True)
        return action

    class EvalEvery(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval = eval_every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                clock.record(self.num_timesteps, act, task, episodes, seed)
                self.next_eval = (self.num_timesteps // eval_every + 1) * eval_every
            return True

    model.learn(total_timesteps=budget, callback=EvalEvery())
    if not clock.curve or clock.curve[-1]["env_steps"] != model.num_timesteps:
        clock.record(model.num_timesteps, act, task, episodes, seed)
    return int(model.num_timesteps)


def run_env_only(task: Task, seed: int, budget: int, clock: Clock) -> int:
    """The env's own cost: ``budget`` steps of one gymnasium env with random actions, no learning.

    Both libraries step the same gymnasium envs, so this is a floor under either's wall clock;
    what each spends above it is its own (acting, learning, bookkeeping, start-up)."""
    import gymnasium as gym

    env = gym.make(task.env)
    env.action_space.seed(seed)
    env.reset(seed=seed)
    for _ in range(budget):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env.close()
    clock.curve.append({"env_steps": budget, "wall_s": clock.wall_s(), "return_mean": float("nan")})
    return budget


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", choices=["rlgear", "sb3", "env"], required=True)
    parser.add_argument("--task", choices=sorted(TASKS_BY_NAME), required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--budget", type=int, required=True)
    parser.add_argument("--eval-every", type=int, required=True)
    parser.add_argument("--eval-episodes", type=int, default=10)
    args = parser.parse_args()
    task = TASKS_BY_NAME[args.task]
    clock = Clock()
    if args.lib == "env":
        steps = run_env_only(task, args.seed, args.budget, clock)
    else:
        runner = run_rlgear if args.lib == "rlgear" else run_sb3
        steps = runner(task, args.seed, args.budget, args.eval_every, args.eval_episodes, clock)
    wall = clock.curve[-1]["wall_s"]  # training ended at the last evaluation
    result = {"env_steps": steps, "wall_s": wall, "eval_s": clock.eval_s, "curve": clock.curve}
    print("SUITE_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
