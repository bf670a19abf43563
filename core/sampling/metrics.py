"""Episode statistics over a sliding window of finished episodes.

Statistics are taken over the last ``metrics_window`` episodes (default 100,
as SB3 and RLlib do), so a figure does not jump with the number of episodes an
iteration happens to finish. Custom metrics recorded by ``on_episode_end``
hooks are aggregated the same way.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlgear.env import ENV_RETURN_INFO_KEY


@dataclass
class Episode:
    """A finished (or running) episode, as hooks see it."""

    env_id: int
    episode_id: int
    worker_index: int = 0
    #: The env's own return (:data:`rlgear.env.ENV_RETURN_INFO_KEY`, beneath reward-changing
    #: wrappers), else the sum of the rewards the env emitted.
    episode_return: float = 0.0
    length: int = 0
    terminated: bool = False
    truncated: bool = False
    custom_metrics: dict[str, float] = field(default_factory=dict)
    user_data: dict[str, Any] = field(default_factory=dict)
    #: The env's info at the episode's final step (gymnasium: that env's ``info``; e.g.
    #: ``is_success``), set before ``on_episode_end``; empty for envs that report none.
    last_info: dict[str, Any] = field(default_factory=dict)
    #: The sum of the rewards training saw, when the env reported its own return beneath wrappers
    #: that change rewards (then it differs from ``episode_return``); None otherwise.
    wrapped_return: float | None = None

    def summary(self) -> dict[str, Any]:
        """What the metrics window keeps (JSON-able; user_data and last_info are dropped)."""
        out = {
            "env_id": self.env_id,
            "episode_id": self.episode_id,
            "worker_index": self.worker_index,
            "episode_return": self.episode_return,
            "length": self.length,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "custom_metrics": {k: float(v) for k, v in self.custom_metrics.items()},
        }
        if self.wrapped_return is not None:
            out["wrapped_return"] = self.wrapped_return
        return out


def env_info_row(info: dict[str, Any] | None, env: int) -> dict[str, Any]:
    """Env ``env``'s entries of a vector env's ``info`` (gymnasium layout: arrays over envs, ``_key`` masks).

    A key whose mask says this env did not set it is left out; numpy scalars become Python ones.
    """
    if not info:
        return {}
    row = {}
    for key, values in info.items():
        if key.startswith("_"):
            continue
        mask = info.get(f"_{key}")
        if mask is not None and not mask[env]:
            continue
        if isinstance(values, dict):  # nested info (gymnasium's "episode" from RecordEpisodeStatistics)
            row[key] = env_info_row(values, env)
            continue
        try:
            value = values[env]
        except (TypeError, IndexError, KeyError):
            continue
        row[key] = value.item() if isinstance(value, np.generic) else value
    return row


def reported_env_return(info: dict[str, Any] | None, env: int) -> float | None:
    """Env ``env``'s own return as its adapter reported it (:data:`rlgear.env.ENV_RETURN_INFO_KEY`), or None."""
    if not info or ENV_RETURN_INFO_KEY not in info:
        return None
    mask = info.get(f"_{ENV_RETURN_INFO_KEY}")
    if mask is not None and not mask[env]:
        return None
    return float(info[ENV_RETURN_INFO_KEY][env])


class MetricsWindow:
    """The last N episode summaries and the statistics over them."""

    def __init__(self, size: int = 100):
        self.episodes: deque[dict[str, Any]] = deque(maxlen=size)

    def add(self, episodes: Iterable[dict[str, Any]]) -> None:
        self.episodes.extend(episodes)

    def stats(self) -> dict[str, Any]:
        returns = [e["episode_return"] for e in self.episodes]
        lengths = [e["length"] for e in self.episodes]
        out: dict[str, Any] = {
            "episode_return_mean": _mean(returns),
            "episode_return_min": min(returns) if returns else None,
            "episode_return_max": max(returns) if returns else None,
            "episode_len_mean": _mean(lengths),
        }
        wrapped = [e["wrapped_return"] for e in self.episodes if "wrapped_return" in e]
        if wrapped:  # the env reported its own returns: what training saw, for comparison
            out["wrapped/episode_return_mean"] = _mean(wrapped)
        policy_returns: dict[str, list[float]] = {}  # multi-agent envs: each policy's agents' rewards
        for e in self.episodes:
            for pid, value in e.get("policy_returns", {}).items():
                policy_returns.setdefault(pid, []).append(value)
        for pid, values in sorted(policy_returns.items()):
            out[f"policy_reward_mean/{pid}"] = _mean(values)
        custom: dict[str, list[float]] = {}
        for e in self.episodes:
            for key, value in e.get("custom_metrics", {}).items():
                custom.setdefault(key, []).append(value)
        for key, values in sorted(custom.items()):
            out[f"custom_metrics/{key}_mean"] = _mean(values)
            out[f"custom_metrics/{key}_min"] = min(values)
            out[f"custom_metrics/{key}_max"] = max(values)
        return out

    def get_state(self) -> list[dict[str, Any]]:
        return list(self.episodes)

    def set_state(self, episodes: list[dict[str, Any]]) -> None:
        self.episodes.clear()
        self.episodes.extend(episodes)


def _mean(values: list[float]) -> float | None:
    if not values:
        return None
    mean = math.fsum(values) / len(values)
    return float(mean)
