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

On a multi-agent env each policy has its own replay buffer (``replay_buffers``), fed only with
its own agents' transitions, and steps 2 and 3 run per policy of ``policies_to_train`` with that
policy's resolved config. The replay buffers are saved in checkpoints
(``training.store_buffer_in_checkpoints``): a single policy's arrays under ``replay_buffer/``
(as before multi-agent), several under ``replay_buffer/<policy id>/``, the JSON part in the
algorithm state. An
algorithm subclasses this with its config (a :class:`rlgear.plugins.families.replay.config.ReplayConfig`)
and policies; its policy's ``learn_on_batch`` leaves ``td_errors`` (per row, in the
batch's order) for prioritized replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.blocks.replay_buffers import (
    BATCH_INDEXES,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    n_step_transitions,
)
from rlgear.blocks.schedules import piecewise_linear
from rlgear.config import RunConfig, multiagent
from rlgear.distributed.rollout_ops import replay, synchronous_parallel_sample
from rlgear.errors import CheckpointError
from rlgear.plugins.families.replay import her, replay_prefill
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
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
    """A Trainer whose training step samples into a replay buffer and learns from replayed minibatches.

    ``offline.input`` pre-fills the buffer with recorded transitions
    (:mod:`~rlgear.plugins.families.replay.replay_prefill`).
    """

    reads_datasets = True

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        """n-step transitions; with ``training.her_strategy``, plus their hindsight relabeled copies."""
        if config.training.her_strategy is not None:
            return her.hindsight_transitions(fragment, config)
        return n_step_transitions(fragment, config.training.n_step, config.training.gamma)

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """``training.her_strategy`` needs whole episodes, one-step transitions, raw goals, gymnasium envs."""
        super().check_config(config)
        if config.training.her_strategy is None:
            return
        refusals = (
            (
                config.workers.batch_mode != "complete_episodes",
                "workers.batch_mode",
                "training.her_strategy relabels goals achieved later in an episode, so it needs whole "
                f"episodes: set it to complete_episodes (it is {config.workers.batch_mode})",
            ),
            (
                config.training.n_step != 1,
                "training.n_step",
                f"training.her_strategy relabels one-step transitions: set it to 1 (it is {config.training.n_step})",
            ),
            (
                config.model.observation_filter != "none",
                "model.observation_filter",
                "training.her_strategy reads the goals from the observations, which a filter would "
                "normalise: set it to none",
            ),
            (
                config.env.adapter != "gymnasium",
                "env.adapter",
                "training.her_strategy takes compute_reward from a gymnasium goal env: use the "
                f"gymnasium adapter (it is {config.env.adapter})",
            ),
        )
        for refused, key, message in refusals:
            if refused:
                raise config.fail(key, message)

    @classmethod
    def check_spaces(cls, config: RunConfig, observation_space: Any, action_space: Any) -> None:
        """With ``training.her_strategy``: a goal env (its Dict keys and compute_reward), on the evaluator."""
        super().check_spaces(config, observation_space, action_space)
        if config.training.her_strategy is None:
            return
        try:
            her.goal_layout(observation_space)
        except ValueError as err:
            raise config.fail(her.STRATEGY_KEY, f"env {config.env.name}: {err}") from None
        her.goal_env_functions(config)  # compute_reward exists (built once per process)

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        #: One replay buffer per policy (``{"default": replay_buffer}`` for a single-agent run);
        #: each policy replays only its own agents' transitions, with its own resolved config.
        self.replay_buffers = {
            pid: make_replay_buffer(multiagent.policy_config(config, pid)) for pid in self.policy_map
        }
        self.replay_buffer = next(iter(self.replay_buffers.values()))
        self._replay_buffer_meta: dict[str, Any] | None = None  # read by set_algorithm_arrays
        self._replay_buffer_metas: dict[str, Any] | None = None  # the same, one per policy
        # from get_algorithm_state, for get_algorithm_arrays
        self._buffer_arrays_out: dict[str, np.ndarray] = {}
        #: ``offline.input``: the datasets' transitions go into the buffer after the first sampled rows
        #: (which fix its columns); a run resumed with a stored buffer does not add them again.
        self.prefill_pending = config.offline.input is not None
        self._prefill_data = replay_prefill.open_for(self) if self.prefill_pending else None
        #: Recorded transitions put in the buffer (``learner/replay_prefilled_rows`` in results).
        self.prefilled_rows = 0

    # --- the algorithm -------------------------------------------------------------------
    def training_step(self) -> dict[str, float]:
        self.set_global_timestep(self.timesteps_total)  # exploration schedules while acting
        batch, steps = synchronous_parallel_sample(
            self.workers, self.config.training.env_steps_per_training_step
        )
        batch, exploration_stats = self.learn_exploration(batch)
        rows_of_policy = (
            batch if isinstance(batch, MultiAgentBatch) else {next(iter(self.replay_buffers)): batch}
        )
        for pid, rows in rows_of_policy.items():
            self.replay_buffers[pid].add(rows)
        if self.prefill_pending:
            self.prefill_pending = False
            self.prefilled_rows = replay_prefill.prefill(self, self._prefill_data)
            self._prefill_data = None
        timesteps = self.timesteps_total + steps
        self.set_global_timestep(timesteps)

        per_policy: dict[str, float] = {}
        learned = False
        for pid in self.policies_to_train:
            policy, buffer = self.policy_map[pid], self.replay_buffers[pid]
            training = policy.config.training
            stats: dict[str, float] = {}
            if timesteps >= training.learning_starts and len(buffer) > 0:
                num_gradient_steps = max(
                    1, round(steps * training.training_intensity / training.train_batch_size)
                )
                stats = self.learn_from_replay(num_gradient_steps, timesteps, policy, buffer)
                learned = True
            stats["replay_buffer_size"] = float(len(buffer))
            per_policy.update({f"{pid}/{key}": value for key, value in stats.items()})
        out = self.learner_stats(per_policy)
        out.update(exploration_stats)
        if self.config.offline.input is not None:
            out["replay_prefilled_rows"] = float(self.prefilled_rows)  # learner/replay_prefilled_rows
        if learned:
            out.update(self.after_learning(timesteps))
        self.workers.sync_weights()
        return out

    def after_learning(self, timesteps: int) -> dict[str, float]:
        """Called after a training step's gradient steps (when any policy learned); returns extra
        stats. Default: nothing."""
        return {}

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
        if not prioritized and hasattr(policy, "learn_on_batches"):
            # learner actors: the minibatches go in one call, not one round trip per gradient step
            # (uniform replay draws the same minibatches either way; prioritized replay needs each
            # step's TD errors before it samples the next)
            minibatches = [replay(buffer, training.train_batch_size) for _ in range(num_gradient_steps)]
            steps = iter(policy.learn_on_batches(minibatches))
        else:
            steps = (self._replay_step(policy, buffer, sample_kwargs) for _ in range(num_gradient_steps))
        totals: dict[str, float] = {}
        for step_stats in steps:
            for key, value in step_stats.items():
                totals[key] = totals.get(key, 0.0) + value
        stats = {key: value / num_gradient_steps for key, value in totals.items()}
        stats["num_grad_updates"] = float(policy.num_grad_updates)
        stats["num_gradient_steps"] = float(num_gradient_steps)
        stats.update({f"prioritized_replay_{key}": value for key, value in sample_kwargs.items()})
        return stats

    @staticmethod
    def _replay_step(policy: Any, buffer: Any, sample_kwargs: dict[str, float]) -> dict[str, float]:
        """One gradient step on a replayed minibatch; with prioritized replay, the minibatch's rows
        then get their new priorities."""
        minibatch = replay(buffer, policy.config.training.train_batch_size, **sample_kwargs)
        stats = policy.learn_on_batch(minibatch)
        if isinstance(buffer, PrioritizedReplayBuffer):  # Schaul et al. 2016: priority = |TD error| (+ eps)
            td_errors = policy.td_errors
            finite = np.isfinite(td_errors)  # a skipped non-finite update keeps the old priorities
            buffer.update_priorities(minibatch[BATCH_INDEXES][finite], td_errors[finite])
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
        self.workers.foreach_worker(
            lambda worker: [p.set_global_timestep(timesteps) for p in worker.policy_map.values()]
        )
        if self.config.learners.num_learners > 0:  # learner actors: their own copies (lr schedules)
            self.learner.set_global_timestep(timesteps)

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
            if len(self.replay_buffers) == 1:
                self._buffer_arrays_out, state["replay_buffer"] = self.replay_buffer.get_state()
            else:  # replay_buffer/<policy id>/... per policy
                self._buffer_arrays_out, state["replay_buffers"] = {}, {}
                for pid, buffer in self.replay_buffers.items():
                    arrays, state["replay_buffers"][pid] = buffer.get_state()
                    self._buffer_arrays_out.update({f"{pid}/{k}": v for k, v in arrays.items()})
        return state

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        self._replay_buffer_meta = state.get("replay_buffer")
        self._replay_buffer_metas = state.get("replay_buffers")

    def get_algorithm_arrays(self) -> dict[str, np.ndarray]:
        buffer_arrays, self._buffer_arrays_out = self._buffer_arrays_out, {}
        return {REPLAY_PREFIX + key: value for key, value in buffer_arrays.items()}

    def set_algorithm_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        if self._replay_buffer_metas is not None or self._replay_buffer_meta is not None:
            self.prefill_pending = False  # the stored buffer holds the recorded rows already
        metas, self._replay_buffer_metas = self._replay_buffer_metas, None
        if metas is not None:
            for pid, meta in metas.items():
                if pid not in self.replay_buffers:
                    raise CheckpointError(
                        f"the checkpoint holds a replay buffer of policy {pid}, which this run lacks"
                    )
                prefix = f"{REPLAY_PREFIX}{pid}/"
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
            k.removeprefix(REPLAY_PREFIX): v for k, v in arrays.items() if k.startswith(REPLAY_PREFIX)
        }
        try:
            self.replay_buffer.set_state(buffer_arrays, meta)
        except ValueError as err:
            raise CheckpointError(f"the checkpoint's replay buffer does not fit: {err}") from err
