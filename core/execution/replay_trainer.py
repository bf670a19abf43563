"""ReplayTrainer: the training step every replay-based algorithm shares (DQN, SAC, TD3, DDPG).

Per training step:
  1. act in the envs for ``env_steps_per_training_step`` env steps and store the
     (n-step) transitions in the replay buffer;
  2. once ``learning_starts`` env steps were sampled, take
     ``round(sampled steps x training_intensity / train_batch_size)`` gradient
     steps (at least one), each on a minibatch replayed uniformly or by priority
     (importance weights with beta annealed; Schaul et al. 2016), then set the
     sampled rows' priorities to the policy's new ``td_errors``;
  3. :meth:`ReplayTrainer.after_learning` (DQN's periodic target update);
  4. send the new weights to the rollout workers.

The replay buffer is saved in checkpoints (``training.store_buffer_in_checkpoints``),
its arrays under ``replay_buffer/`` and its JSON part in the algorithm state. An
algorithm subclasses this with its config (a :class:`rlgear.config.replay.ReplayConfig`)
and policies; its policy's ``learn_on_batch`` leaves ``td_errors`` (per row, in the
batch's order) for prioritized replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.errors import CheckpointError
from rlgear.execution.replay_buffers import (
    BATCH_INDEXES,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    n_step_transitions,
)
from rlgear.execution.rollout_ops import replay, synchronous_parallel_sample
from rlgear.execution.schedules import piecewise_linear
from rlgear.sample_batch import SampleBatch
from rlgear.trainer import Trainer

# Changing these needs another replay buffer, so reset_config() refuses them.
REPLAY_BUFFER_KEYS = (
    "buffer_size",
    "prioritized_replay",
    "prioritized_replay_alpha",
    "prioritized_replay_eps",
)
# Checkpoint array prefix of the replay buffer's contents.
REPLAY_PREFIX = "replay_buffer/"


def make_replay_buffer(config: RunConfig) -> ReplayBuffer:
    """The buffer ``config.training`` asks for: uniform, or proportional prioritized."""
    training = config.training
    if training.prioritized_replay:
        return PrioritizedReplayBuffer(
            training.buffer_size,
            alpha=training.prioritized_replay_alpha,
            beta=training.prioritized_replay_beta,
            eps=training.prioritized_replay_eps,
            seed=config.seed,
        )
    return ReplayBuffer(training.buffer_size, seed=config.seed)


class ReplayTrainer(Trainer):
    """A Trainer whose training step samples into a replay buffer and learns from replayed minibatches."""

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        return n_step_transitions(fragment, config.training.n_step, config.training.gamma)

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        self.replay_buffer = make_replay_buffer(config)
        self._replay_buffer_meta: dict[str, Any] | None = None  # read by set_algorithm_arrays
        # from get_algorithm_state, for get_algorithm_arrays
        self._buffer_arrays_out: dict[str, np.ndarray] = {}

    # --- the algorithm -------------------------------------------------------------------
    def training_step(self) -> dict[str, float]:
        training = self.config.training
        self.set_global_timestep(self.timesteps_total)  # exploration schedules while acting
        batch, steps = synchronous_parallel_sample(self.workers, training.env_steps_per_training_step)
        self.replay_buffer.add(batch)
        timesteps = self.timesteps_total + steps
        self.set_global_timestep(timesteps)

        stats: dict[str, float] = {}
        if timesteps >= training.learning_starts and len(self.replay_buffer) > 0:
            num_gradient_steps = max(
                1, round(steps * training.training_intensity / training.train_batch_size)
            )
            stats = self.learn_from_replay(num_gradient_steps, timesteps)
            stats.update(self.after_learning(timesteps))
        self.workers.sync_weights()
        return {**stats, "replay_buffer_size": float(len(self.replay_buffer))}

    def after_learning(self, timesteps: int) -> dict[str, float]:
        """Called after each training step's gradient steps; returns extra stats. Default: nothing."""
        return {}

    def learn_from_replay(self, num_gradient_steps: int, timesteps: int) -> dict[str, float]:
        """Gradient steps on replayed minibatches; returns the learner stats averaged over them."""
        training = self.config.training
        prioritized = isinstance(self.replay_buffer, PrioritizedReplayBuffer)
        sample_kwargs = {"beta": self.prioritized_replay_beta(timesteps)} if prioritized else {}
        totals: dict[str, float] = {}
        for _ in range(num_gradient_steps):
            minibatch = replay(self.replay_buffer, training.train_batch_size, **sample_kwargs)
            for key, value in self.policy.learn_on_batch(minibatch).items():
                totals[key] = totals.get(key, 0.0) + value
            if prioritized:  # Schaul et al. 2016: priority = |TD error| (+ eps, added by the buffer)
                td_errors = self.policy.td_errors
                finite = np.isfinite(td_errors)  # a skipped non-finite update keeps the old priorities
                self.replay_buffer.update_priorities(minibatch[BATCH_INDEXES][finite], td_errors[finite])
        stats = {key: value / num_gradient_steps for key, value in totals.items()}
        stats["num_grad_updates"] = float(self.policy.num_grad_updates)
        stats["num_gradient_steps"] = float(num_gradient_steps)
        stats.update({f"prioritized_replay_{key}": value for key, value in sample_kwargs.items()})
        return stats

    def prioritized_replay_beta(self, timesteps: int) -> float:
        """The importance-sampling exponent, annealed linearly towards its final value."""
        training = self.config.training
        return piecewise_linear(
            [
                [0, training.prioritized_replay_beta],
                [
                    training.prioritized_replay_beta_annealing_timesteps,
                    training.final_prioritized_replay_beta,
                ],
            ],
            timesteps,
        )

    def set_global_timestep(self, timesteps: int) -> None:
        """Schedules (exploration, learning rate) on every worker's policy follow ``timesteps``."""
        self.workers.foreach_worker(lambda worker: worker.policy.set_global_timestep(timesteps))

    # --- hyperparameters on a live trainer -------------------------------------------------
    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """As :meth:`Trainer.reset_config`; False also when the replay buffer would have to change."""
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.training, new_config.training
        if any(getattr(old, key) != getattr(new, key) for key in REPLAY_BUFFER_KEYS):
            return False
        return super().reset_config(new_config)

    # --- checkpoints -----------------------------------------------------------------------
    def get_algorithm_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if self.config.training.store_buffer_in_checkpoints:
            # The arrays go to safetensors through get_algorithm_arrays(), which the
            # Trainer calls right after this; the JSON part stays here.
            self._buffer_arrays_out, state["replay_buffer"] = self.replay_buffer.get_state()
        return state

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        self._replay_buffer_meta = state.get("replay_buffer")

    def get_algorithm_arrays(self) -> dict[str, np.ndarray]:
        buffer_arrays, self._buffer_arrays_out = self._buffer_arrays_out, {}
        return {REPLAY_PREFIX + key: value for key, value in buffer_arrays.items()}

    def set_algorithm_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        meta, self._replay_buffer_meta = self._replay_buffer_meta, None
        if meta is None:
            return
        buffer_arrays = {
            k.removeprefix(REPLAY_PREFIX): v for k, v in arrays.items() if k.startswith(REPLAY_PREFIX)
        }
        try:
            self.replay_buffer.set_state(buffer_arrays, meta)
        except ValueError as err:
            raise CheckpointError(f"the checkpoint's replay buffer does not fit: {err}") from err
