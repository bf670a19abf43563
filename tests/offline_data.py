"""A test double of the dataset reader (``rlgear.offline.dataset.open_datasets``) over in-memory episodes.

Test fixture only: it implements the interface the offline trainer reads
(:class:`rlgear.plugins.families.offline.data.OfflineData`) so that the offline algorithms are
tested without Minari files, and records episodes of scripted CartPole and Pendulum policies to
fill it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rlgear.plugins.envs.gymnasium_env import convert_space
from rlgear.sample_batch import SampleBatch as SB

#: A linear CartPole controller that keeps the pole up for all 500 steps (checked in the tests).
EXPERT_WEIGHTS = np.array([0.1, 0.5, 3.0, 1.0])


def expert_action(obs: np.ndarray) -> int:
    return int(np.dot(EXPERT_WEIGHTS, obs) > 0)


@dataclass
class Episode:
    observations: np.ndarray  # [T + 1, ...]
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    action_logp: np.ndarray | None
    id: int


class InMemoryData:
    """The reader's interface over a list of episodes (transitions drawn uniformly, with replacement)."""

    def __init__(
        self, episodes: list[Episode], observation_space: Any, action_space: Any, env_id: str = "CartPole-v1"
    ):
        self._episodes = episodes
        self.observation_space = observation_space
        self.action_space = action_space
        self.total_steps = sum(len(e.actions) for e in episodes)
        self.total_episodes = len(episodes)
        self.has_action_logp = all(e.action_logp is not None for e in episodes)
        self.env_id = env_id

    def episodes(
        self, shard: int = 0, num_shards: int = 1, rng: np.random.Generator | None = None
    ) -> Iterator[Episode]:
        order = np.arange(len(self._episodes)) if rng is None else rng.permutation(len(self._episodes))
        for index in order[shard::num_shards]:
            yield self._episodes[index]

    def transitions(
        self,
        batch_size: int,
        rng: np.random.Generator,
        shard: int = 0,
        num_shards: int = 1,
        buffer_episodes: int = 1000,
        obs_transform: Callable[[Any], Any] | None = None,
        action_mask: Callable[[Any], Any] | None = None,
    ) -> Iterator[SB]:
        transform = obs_transform or np.asarray  # CartPole: no mask to read
        features = [np.asarray(transform(e.observations)) for e in self._episodes]
        obs = np.concatenate([f[:-1] for f in features])
        next_obs = np.concatenate([f[1:] for f in features])
        columns = {
            SB.OBS: obs,
            SB.ACTIONS: np.concatenate([e.actions for e in self._episodes]),
            SB.REWARDS: np.concatenate([e.rewards for e in self._episodes]),
            SB.NEXT_OBS: next_obs,
            "terminateds": np.concatenate([e.terminations for e in self._episodes]),
            "truncateds": np.concatenate([e.truncations for e in self._episodes]),
        }
        while True:
            rows = rng.integers(len(obs), size=batch_size)
            yield SB({key: value[rows] for key, value in columns.items()})


def record_cartpole(
    policy: Callable[[np.ndarray, np.random.Generator], int], episodes: int, seed: int
) -> InMemoryData:
    """``episodes`` CartPole-v1 episodes of ``policy(obs, rng)``, as the reader would give them."""
    return record("CartPole-v1", policy, episodes, seed, np.int64)


def pendulum_action(obs: np.ndarray) -> float:
    """A scripted Pendulum-v1 controller: energy pumping to swing up, a PD law near the top.

    Pendulum-v1's dynamics are ``theta'' = 15 sin(theta) + 3 u`` (theta 0 upright), so the energy
    ``E = 0.5 theta'^2 + 15 cos(theta)`` is 15 at rest on top and changes at ``3 u theta'``: away
    from the top the torque ``0.5 (15 - E) theta'`` pumps it towards 15; within 0.6 rad of the top
    ``u = -(10 theta + 2 theta')`` balances. Torque clipped to [-2, 2]; its mean return over 10
    episodes is about -140 (checked in the tests: the best agents reach about -140 to -150).
    """
    cos, sin, velocity = (float(x) for x in obs)
    angle = np.arctan2(sin, cos)
    if abs(angle) < 0.6:
        torque = -(10.0 * angle + 2.0 * velocity)
    else:
        energy = 0.5 * velocity**2 + 15.0 * cos
        torque = 0.5 * (15.0 - energy) * velocity
        if abs(velocity) < 1e-3:  # at rest at the bottom: push to start the swing
            torque = 1.0
    return float(np.clip(torque, -2.0, 2.0))


def record_pendulum(
    policy: Callable[[np.ndarray, np.random.Generator], float], episodes: int, seed: int
) -> InMemoryData:
    """``episodes`` Pendulum-v1 episodes (200 steps, truncated) of ``policy(obs, rng)``: Box actions
    ``[T, 1]`` float32, as the reader would give them."""
    return record(
        "Pendulum-v1", lambda obs, rng: np.array([policy(obs, rng)], np.float32), episodes, seed, np.float32
    )


def play_episode(env: Any, act: Callable[[Any], Any], seed: int) -> tuple[list, list, list, list, list]:
    """One episode of ``act(obs)`` in ``env`` reset with ``seed``: its observations (``T + 1``, the
    final one included), actions, rewards, terminations and truncations (``T`` each), as lists."""
    obs, _ = env.reset(seed=seed)
    observations, actions, rewards, terminations, truncations = [obs], [], [], [], []
    while True:
        action = act(obs)
        obs, reward, terminated, truncated, _ = env.step(action)
        observations.append(obs)
        actions.append(action)
        rewards.append(reward)
        terminations.append(terminated)
        truncations.append(truncated)
        if terminated or truncated:
            return observations, actions, rewards, terminations, truncations


def record(
    env_id: str,
    policy: Callable[[np.ndarray, np.random.Generator], Any],
    episodes: int,
    seed: int,
    action_dtype: Any,
) -> InMemoryData:
    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    recorded = []
    for index in range(episodes):
        observations, actions, rewards, terminations, truncations = play_episode(
            env, lambda obs: policy(obs, rng), seed + index
        )
        recorded.append(
            Episode(
                np.asarray(observations, dtype=np.float32),
                np.asarray(actions, dtype=action_dtype),
                np.asarray(rewards, dtype=np.float32),
                np.asarray(terminations),
                np.asarray(truncations),
                None,
                index,
            )
        )
    env.close()
    return InMemoryData(
        recorded,
        convert_space(env.observation_space, "observation", env_id),
        convert_space(env.action_space, "action", env_id),
        env_id,
    )


def use_data(monkeypatch: Any, data: InMemoryData) -> None:
    """Make offline trainers read ``data`` whatever ``offline.input`` says."""
    from rlgear.plugins.families.offline import offline_trainer

    monkeypatch.setattr(offline_trainer, "open_data", lambda config: data)
