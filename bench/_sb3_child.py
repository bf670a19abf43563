"""One Stable-Baselines3 PPO run on CartPole-v1; run by ``bench/sb3_baseline.py`` in a fresh process.

Executed by the SB3 virtualenv's interpreter (not rlgear's): imports nothing from
rlgear and nothing from bench/. Prints one line ``SB3_RESULT {json}`` at the end.

Usage: /work/venv-sb3/bin/python bench/_sb3_child.py --seed 0 --criterion eval
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # as early as possible; the process's age at this point is added below


def _process_age_s() -> float:
    """Seconds since the kernel started this process (10 ms resolution), from /proc."""
    import os

    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 (starttime); fields[0] is field 3
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


_AGE_AT_T0 = _process_age_s()

import argparse  # noqa: E402
import json  # noqa: E402

THRESHOLD = 475.0
CHECK_EVERY_ENV_STEPS = 2048
N_ENVS = 8
MAX_TIMESTEPS = 150_000
SCHEDULE_END_TIMESTEPS = 100_000  # lr and clip reach 0 here, as in configs/ppo-cartpole.yaml


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--criterion", choices=["eval", "train"], required=True)
    args = parser.parse_args()

    import gymnasium
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import (
        BaseCallback,
        EvalCallback,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import LinearSchedule

    torch.set_num_threads(1)

    class StopOnTrainingMean(BaseCallback):
        """Stop when rollout/ep_rew_mean (last <= 100 training episodes) >= threshold.

        Checked every ``check_freq`` calls (one call = one step of all envs), like EvalCallback.
        """

        def __init__(self, check_freq: int, threshold: float) -> None:
            super().__init__()
            self.check_freq = check_freq
            self.threshold = threshold
            self.last_mean: float | None = None

        def _on_step(self) -> bool:
            if self.n_calls % self.check_freq == 0 and len(self.model.ep_info_buffer) > 0:
                self.last_mean = float(np.mean([info["r"] for info in self.model.ep_info_buffer]))
                return self.last_mean < self.threshold
            return True

    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=args.seed)
    # rl-baselines3-zoo's tuned CartPole-v1 PPO (hyperparams/ppo.yml), with lr and clip_range
    # annealed linearly to 0 at 100k env steps (the zoo's n_timesteps) while allowing 150k
    # in total, exactly like configs/ppo-cartpole.yaml's schedules and stop.
    end_fraction = SCHEDULE_END_TIMESTEPS / MAX_TIMESTEPS
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=LinearSchedule(0.001, 0.0, end_fraction),
        clip_range=LinearSchedule(0.2, 0.0, end_fraction),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    check_freq = max(CHECK_EVERY_ENV_STEPS // N_ENVS, 1)  # EvalCallback counts calls, not env steps
    if args.criterion == "eval":
        eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=args.seed + 10_000)
        callback = EvalCallback(
            eval_env,
            callback_on_new_best=StopTrainingOnRewardThreshold(reward_threshold=THRESHOLD, verbose=0),
            n_eval_episodes=10,
            eval_freq=check_freq,
            deterministic=True,
            verbose=0,
        )
    else:
        callback = StopOnTrainingMean(check_freq, THRESHOLD)

    learn_start = time.perf_counter()
    model.learn(total_timesteps=MAX_TIMESTEPS, callback=callback)
    now = time.perf_counter()

    if args.criterion == "eval":
        metric = callback.best_mean_reward if callback.n_calls >= check_freq else None
    else:
        metric = callback.last_mean
    result = {
        "seed": args.seed,
        "criterion": args.criterion,
        "solved": metric is not None and metric >= THRESHOLD,
        "metric": None if metric is None else round(float(metric), 1),
        "env_steps": int(model.num_timesteps),
        "wall_s_from_process_start": round(_AGE_AT_T0 + (now - _T0), 2),
        "learn_time_s": round(now - learn_start, 2),
        "versions": {
            "sb3": stable_baselines3.__version__,
            "torch": torch.__version__,
            "gymnasium": gymnasium.__version__,
            "numpy": np.__version__,
        },
    }
    print("SB3_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
