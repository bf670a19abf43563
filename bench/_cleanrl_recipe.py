"""CleanRL's ``ppo_atari.py`` recipe as a plain PyTorch loop: bench/atari.py's third column.

CleanRL is a set of single-file scripts, not a library one can import, so this file is written for
the benchmark from the recipe's published settings (CleanRL's docs and its ``ppo_atari.py``
arguments), not copied from it: 8 envs x 128 steps, 4 epochs of 4 minibatches, Adam (lr 2.5e-4,
eps 1e-5) annealed linearly, gamma 0.99, GAE lambda 0.95, advantages normalized per minibatch,
clip 0.1 on the ratio and on the value (clip_vloss), entropy 0.01, value 0.5, gradient norm 0.5;
the Nature CNN (32x8/4, 64x4/2, 64x3/1, 512) on frames / 255 with orthogonal initialization
(sqrt 2; 0.01 for the policy head, 1 for the value head).

What differs from the script, so that the three libraries run one protocol: the envs are
rlgear's ``env.preset: atari`` (Machado et al. 2018: sticky actions, no life-loss episodes), not
CleanRL's own wrappers; rewards are clipped to their sign in the loop (the reported returns stay the
game's score); the learning rate anneals over rl-baselines3-zoo's 10M steps, as the SB3 column's
does, so a short budget trains at the rates the full one would.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

RECIPE = {
    "num_envs": 8, "num_steps": 128, "update_epochs": 4, "num_minibatches": 4, "learning_rate": 2.5e-4,
    "anneal_over_steps": 10_000_000, "gamma": 0.99, "gae_lambda": 0.95, "clip_coef": 0.1,
    "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5,
}  # fmt: skip


def make_agent(num_actions: int, in_channels: int = 4) -> Any:
    import torch
    from torch import nn

    def init(layer: nn.Module, std: float = float(np.sqrt(2))) -> nn.Module:
        nn.init.orthogonal_(layer.weight, std)
        nn.init.constant_(layer.bias, 0.0)
        return layer

    class Agent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.network = nn.Sequential(
                init(nn.Conv2d(in_channels, 32, 8, stride=4)), nn.ReLU(),
                init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
                init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
                nn.Flatten(), init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU(),
            )  # fmt: skip
            self.actor = init(nn.Linear(512, num_actions), 0.01)
            self.critic = init(nn.Linear(512, 1), 1.0)

        def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            hidden = self.network(frames / 255.0)
            return self.actor(hidden), self.critic(hidden).squeeze(-1)

    return Agent()


def train(
    make_env: Callable[[], Any], budget: int, seed: int, on_update: Callable[[dict[str, Any]], None]
) -> int:
    """Train for ``budget`` agent steps (all envs together); ``on_update`` gets, after each update,
    ``{"env_steps", "return_mean" (last 100 episodes, or None), "episodes"}``. Returns the env steps."""
    import gymnasium as gym
    import torch

    r = RECIPE
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    envs = gym.vector.SyncVectorEnv(
        [make_env for _ in range(r["num_envs"])], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    obs, _ = envs.reset(seed=seed)
    channels_first = obs.shape[1] == 4  # gymnasium's FrameStackObservation stacks first: [N, 4, 84, 84]
    to_frames = (lambda o: o) if channels_first else (lambda o: np.moveaxis(o, -1, 1))
    agent = make_agent(int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=r["learning_rate"], eps=1e-5)
    n, t_len = r["num_envs"], r["num_steps"]
    batch = n * t_len
    minibatch = batch // r["num_minibatches"]
    frames = np.zeros((t_len, n, *to_frames(obs).shape[1:]), np.uint8)
    actions, logps, values = (np.zeros((t_len, n), dt) for dt in (np.int64, np.float32, np.float32))
    rewards, dones = np.zeros((t_len, n), np.float32), np.zeros((t_len, n), np.float32)
    running, finished = np.zeros(n), deque(maxlen=100)
    episodes, steps = 0, 0
    next_done = np.zeros(n, np.float32)
    while steps < budget:
        lr_fraction = max(0.0, 1.0 - steps / r["anneal_over_steps"])
        optimizer.param_groups[0]["lr"] = lr_fraction * r["learning_rate"]
        for t in range(t_len):
            frames[t], dones[t] = to_frames(obs), next_done
            with torch.no_grad():
                logits, value = agent(torch.as_tensor(frames[t], dtype=torch.float32))
                dist = torch.distributions.Categorical(logits=logits)
                action = dist.sample()
            actions[t], logps[t], values[t] = action.numpy(), dist.log_prob(action).numpy(), value.numpy()
            obs, reward, terminated, truncated, _ = envs.step(actions[t])
            rewards[t] = np.sign(reward)
            running += reward
            ended = terminated | truncated
            for i in np.flatnonzero(ended):
                finished.append(running[i])
                running[i] = 0.0
            episodes += int(ended.sum())
            next_done = ended.astype(np.float32)  # CleanRL bootstraps neither termination nor truncation
            steps += n
        with torch.no_grad():
            _, next_value = agent(torch.as_tensor(to_frames(obs), dtype=torch.float32))
        advantages = np.zeros_like(rewards)
        last, following = 0.0, next_value.numpy()
        for t in reversed(range(t_len)):
            nonterminal = 1.0 - (next_done if t == t_len - 1 else dones[t + 1])
            delta = rewards[t] + r["gamma"] * following * nonterminal - values[t]
            last = delta + r["gamma"] * r["gae_lambda"] * nonterminal * last
            advantages[t], following = last, values[t]
        returns = advantages + values
        flat = {
            "frames": torch.as_tensor(frames.reshape(batch, *frames.shape[2:]), dtype=torch.float32),
            "actions": torch.as_tensor(actions.reshape(batch)),
            "logps": torch.as_tensor(logps.reshape(batch)),
            "advantages": torch.as_tensor(advantages.reshape(batch)),
            "returns": torch.as_tensor(returns.reshape(batch)),
            "values": torch.as_tensor(values.reshape(batch)),
        }
        for _ in range(r["update_epochs"]):
            order = rng.permutation(batch)
            for start in range(0, batch, minibatch):
                index = torch.as_tensor(order[start : start + minibatch])
                _minibatch_step(agent, optimizer, {k: v[index] for k, v in flat.items()})
        on_update(
            {
                "env_steps": steps,
                "return_mean": float(np.mean(finished)) if finished else None,
                "episodes": episodes,
                "time": time.perf_counter(),
            }
        )
    envs.close()
    return steps


def _minibatch_step(agent: Any, optimizer: Any, mb: dict[str, Any]) -> None:
    import torch

    r = RECIPE
    logits, new_values = agent(mb["frames"])
    dist = torch.distributions.Categorical(logits=logits)
    ratio = torch.exp(dist.log_prob(mb["actions"]) - mb["logps"])
    adv = (mb["advantages"] - mb["advantages"].mean()) / (mb["advantages"].std() + 1e-8)
    clip = r["clip_coef"]
    policy_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
    clipped = mb["values"] + torch.clamp(new_values - mb["values"], -clip, clip)
    value_loss = 0.5 * torch.max((new_values - mb["returns"]) ** 2, (clipped - mb["returns"]) ** 2).mean()
    loss = policy_loss - r["ent_coef"] * dist.entropy().mean() + r["vf_coef"] * value_loss
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(agent.parameters(), r["max_grad_norm"])
    optimizer.step()
