"""DQN's training step, written once for every backend.

Per training step (Mnih et al. 2015, Algorithm 1, with the Rainbow switches of
Hessel et al. 2018 as config options):
  1. act epsilon-greedily in the envs for ``env_steps_per_training_step`` env
     steps and store the (n-step) transitions in the replay buffer;
  2. once ``learning_starts`` env steps were sampled, take
     ``round(sampled steps x training_intensity / train_batch_size)`` gradient
     steps, each on a minibatch replayed uniformly or by priority (with
     importance weights, beta annealed), then set the sampled rows' priorities
     to their new |TD errors|;
  3. every ``target_network_update_freq`` env steps, move the target network
     towards the online one (a copy when ``tau`` is 1);
  4. send the new weights to the rollout workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.config import RunConfig, multiagent
from rlgear.errors import CheckpointError
from rlgear.execution.replay_buffers import (
    BATCH_INDEXES,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    n_step_transitions,
)
from rlgear.execution.rollout_ops import replay, synchronous_parallel_sample
from rlgear.execution.schedules import piecewise_linear
from rlgear.plugins.algorithms.dqn.config import DQNConfig
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
from rlgear.trainer import Trainer

# Changing these needs another replay buffer, so reset_config() refuses them.
_REPLAY_BUFFER_KEYS = (
    "buffer_size",
    "prioritized_replay",
    "prioritized_replay_alpha",
    "prioritized_replay_eps",
)
# Checkpoint array prefix of the replay buffer's contents.
_REPLAY_PREFIX = "replay_buffer/"


def make_replay_buffer(config: RunConfig) -> ReplayBuffer:
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


class DQN(Trainer):
    name = "dqn"
    description = (
        "Deep Q-Network with switches for double Q, dueling heads, n-step returns and "
        "prioritized replay; discrete actions"
    )
    config_class = DQNConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.dqn.tf_policy:DQNTFPolicy",
        "torch": "rlgear.plugins.algorithms.dqn.torch_policy:DQNTorchPolicy",
    }
    action_spaces = frozenset({"discrete"})
    multi_agent = True  # a replay buffer per policy

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        return n_step_transitions(fragment, config.training.n_step, config.training.gamma)

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        self.replay_buffer = make_replay_buffer(config)
        #: One replay buffer per policy (``{"default": replay_buffer}`` for a single-agent run);
        #: each policy replays only its own agents' transitions, with its own resolved config.
        first, *others = self.policy_map
        self.replay_buffers = {first: self.replay_buffer}
        for pid in others:
            self.replay_buffers[pid] = make_replay_buffer(multiagent.policy_config(config, pid))
        self.last_target_update = 0  # timesteps_total when the target network was last updated
        self.num_target_updates = 0
        self._replay_buffer_meta: dict[str, Any] | None = None  # read by set_algorithm_state
        self._replay_buffer_metas: dict[str, Any] | None = None  # the same, one per policy
        self._buffer_arrays_out: dict[
            str, np.ndarray
        ] = {}  # from get_algorithm_state, for get_algorithm_arrays

    # --- the algorithm -------------------------------------------------------------------
    def training_step(self) -> dict[str, float]:
        training = self.config.training
        self.set_global_timestep(self.timesteps_total)  # epsilon while acting
        batch, steps = synchronous_parallel_sample(self.workers, training.env_steps_per_training_step)
        if isinstance(batch, MultiAgentBatch):
            return self.multi_agent_training_step(batch, steps)
        self.replay_buffer.add(batch)
        timesteps = self.timesteps_total + steps
        self.set_global_timestep(timesteps)

        stats: dict[str, float] = {}
        if timesteps >= training.learning_starts and len(self.replay_buffer) > 0:
            num_gradient_steps = max(
                1, round(steps * training.training_intensity / training.train_batch_size)
            )
            stats = self.learn_from_replay(num_gradient_steps, timesteps)
            if timesteps - self.last_target_update >= training.target_network_update_freq:
                self.policy.update_target(training.tau)
                self.last_target_update = timesteps
                self.num_target_updates += 1
        self.workers.sync_weights()
        return {
            **stats,
            "epsilon": self.policy.epsilon(),
            "replay_buffer_size": float(len(self.replay_buffer)),
            "num_target_updates": float(self.num_target_updates),
        }

    def multi_agent_training_step(self, batch: MultiAgentBatch, steps: int) -> dict[str, float]:
        """The same step per policy: its agents' transitions into its buffer, its own updates."""
        timesteps = self.timesteps_total + steps
        for pid, rows in batch.items():
            self.replay_buffers[pid].add(rows)
        self.set_global_timestep(timesteps)
        stats: dict[str, float] = {}
        update_target = timesteps - self.last_target_update >= self.config.training.target_network_update_freq
        for pid in self.policies_to_train:
            policy, buffer = self.policy_map[pid], self.replay_buffers[pid]
            training = policy.config.training
            per_policy: dict[str, float] = {
                "epsilon": policy.epsilon(),
                "replay_buffer_size": float(len(buffer)),
            }
            if timesteps >= training.learning_starts and len(buffer) > 0:
                num_gradient_steps = max(
                    1, round(steps * training.training_intensity / training.train_batch_size)
                )
                per_policy.update(self.learn_from_replay(num_gradient_steps, timesteps, policy, buffer))
                if update_target:
                    policy.update_target(training.tau)
            stats.update({f"{pid}/{key}": value for key, value in per_policy.items()})
        if update_target and timesteps >= self.config.training.learning_starts:
            self.last_target_update = timesteps
            self.num_target_updates += 1
        self.workers.sync_weights()
        stats = self.learner_stats(stats)
        stats["num_target_updates"] = float(self.num_target_updates)
        return stats

    def learn_from_replay(
        self, num_gradient_steps: int, timesteps: int, policy: Any = None, buffer: Any = None
    ) -> dict[str, float]:
        """Gradient steps on replayed minibatches; returns the learner stats averaged over them.

        ``policy`` and ``buffer`` default to the run's only policy and its replay buffer.
        """
        policy = self.policy if policy is None else policy
        buffer = self.replay_buffer if buffer is None else buffer
        training = policy.config.training
        prioritized = isinstance(buffer, PrioritizedReplayBuffer)
        sample_kwargs = {"beta": self.prioritized_replay_beta(timesteps)} if prioritized else {}
        totals: dict[str, float] = {}
        for _ in range(num_gradient_steps):
            minibatch = replay(buffer, training.train_batch_size, **sample_kwargs)
            for key, value in policy.learn_on_batch(minibatch).items():
                totals[key] = totals.get(key, 0.0) + value
            if prioritized:  # Schaul et al. 2016: priority = |TD error| (+ eps, added by the buffer)
                td_errors = policy.td_errors
                finite = np.isfinite(td_errors)  # a skipped non-finite update keeps the old priorities
                buffer.update_priorities(minibatch[BATCH_INDEXES][finite], td_errors[finite])
        stats = {key: value / num_gradient_steps for key, value in totals.items()}
        stats["num_grad_updates"] = float(policy.num_grad_updates)
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
        """Schedules (epsilon, learning rate) on every worker's policy follow ``timesteps``."""
        self.workers.foreach_worker(
            lambda worker: [p.set_global_timestep(timesteps) for p in worker.policy_map.values()]
        )

    # --- hyperparameters on a live trainer -------------------------------------------------
    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """As :meth:`Trainer.reset_config`; False also when the replay buffer would have to change."""
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.training, new_config.training
        if any(getattr(old, key) != getattr(new, key) for key in _REPLAY_BUFFER_KEYS):
            return False
        return super().reset_config(new_config)

    # --- checkpoints -----------------------------------------------------------------------
    def get_algorithm_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "last_target_update": self.last_target_update,
            "num_target_updates": self.num_target_updates,
        }
        if self.config.training.store_buffer_in_checkpoints:
            # The arrays go to safetensors through get_algorithm_arrays(), which the
            # Trainer calls right after this; the JSON part stays here.
            if len(self.replay_buffers) == 1:
                self._buffer_arrays_out, state["replay_buffer"] = self.replay_buffer.get_state()
            else:  # replay_buffer/<policy id>/... per policy
                self._buffer_arrays_out, state["replay_buffers"] = {}, {}
                for pid, buffer in self.replay_buffers.items():
                    arrays, state["replay_buffers"][pid] = buffer.get_state()
                    self._buffer_arrays_out.update({f"{pid}/{k}": v for k, v in arrays.items()})
        return state

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        self.last_target_update = int(state.get("last_target_update", 0))
        self.num_target_updates = int(state.get("num_target_updates", 0))
        self._replay_buffer_meta = state.get("replay_buffer")
        self._replay_buffer_metas = state.get("replay_buffers")

    def get_algorithm_arrays(self) -> dict[str, np.ndarray]:
        buffer_arrays, self._buffer_arrays_out = self._buffer_arrays_out, {}
        return {_REPLAY_PREFIX + key: value for key, value in buffer_arrays.items()}

    def set_algorithm_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        metas, self._replay_buffer_metas = getattr(self, "_replay_buffer_metas", None), None
        if metas is not None:
            for pid, meta in metas.items():
                prefix = f"{_REPLAY_PREFIX}{pid}/"
                try:
                    self.replay_buffers[pid].set_state(
                        {k.removeprefix(prefix): v for k, v in arrays.items() if k.startswith(prefix)}, meta
                    )
                except (KeyError, ValueError) as err:
                    raise CheckpointError(
                        f"the checkpoint's replay buffer of policy {pid} does not fit: {err}"
                    ) from err
            return
        meta, self._replay_buffer_meta = self._replay_buffer_meta, None
        if meta is None:
            return
        buffer_arrays = {
            k.removeprefix(_REPLAY_PREFIX): v for k, v in arrays.items() if k.startswith(_REPLAY_PREFIX)
        }
        try:
            self.replay_buffer.set_state(buffer_arrays, meta)
        except ValueError as err:
            raise CheckpointError(f"the checkpoint's replay buffer does not fit: {err}") from err
