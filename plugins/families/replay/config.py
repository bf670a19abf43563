"""The hyperparameters every replay-based algorithm shares: sampling, the replay buffer, n-step returns.

DQN, SAC, TD3 and DDPG subclass :class:`ReplayConfig` (through their own config
classes) and are trained by :class:`rlgear.plugins.families.replay.replay_trainer.ReplayTrainer`,
which reads exactly these keys. ``train_batch_size`` here is the replay minibatch
(rows per gradient step), as in RLlib's DQN; how many env steps a training step
samples is ``env_steps_per_training_step``, and ``training_intensity`` sets how
many replayed rows are learned from per sampled env step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlgear.config import TrainingConfig
from rlgear.config.schema import doc


@dataclass
class ReplayConfig(TrainingConfig):
    # --- sampling and replay ----------------------------------------------------
    env_steps_per_training_step: int = doc(
        "Env steps sampled (all envs together) and added to the replay buffer per training step. "
        "Sampling goes in whole fragments of workers.rollout_fragment_length x envs env steps, so "
        "set workers.rollout_fragment_length to this / num_envs_per_worker ('auto' divides "
        "train_batch_size, the replay minibatch, instead).",
        64,
    )
    buffer_size: int = doc("Capacity of the replay buffer, in transitions.", 50_000)
    store_buffer_in_checkpoints: bool = doc(
        "Save the replay buffer in checkpoints, so a restored run continues exactly "
        "(turn off for large observations: the buffer dominates the checkpoint's size).",
        True,
    )
    learning_starts: int = doc(
        "Env steps sampled (with the initial exploration) before the first gradient step.", 1000
    )
    train_batch_size: int = doc("Replay rows per gradient step (the minibatch).", 64)
    training_intensity: float = doc(
        "Replayed rows learned from per sampled env step: each training step makes "
        "round(sampled env steps x training_intensity / train_batch_size) gradient steps "
        "(at least 1 once learning has started).",
        8.0,
    )
    n_step: int = doc(
        "Bootstrap after n rewards (Sutton 1988; Hessel et al. 2018 use 3). Windows are cut at "
        "the end of a sampled fragment and at episode ends.",
        1,
    )

    # --- hindsight experience replay (Andrychowicz et al. 2017) --------------------------
    her_strategy: Literal["future", "final", "episode"] | None = doc(
        "Hindsight experience replay on a goal env (Dict observation with observation, "
        "achieved_goal, desired_goal and the env's compute_reward): each transition is stored "
        "with her_k more copies whose desired_goal is an achieved goal of the same episode, "
        "rewards recomputed. 'future': achieved after the transition; 'final': the episode's "
        "last; 'episode': any step's. null: off. Needs workers.batch_mode: complete_episodes "
        "and n_step: 1 (docs/offpolicy.md#hindsight-experience-replay).",
        None,
    )
    her_k: int = doc(
        "Relabeled copies stored per real transition with her_strategy, so k/(k+1) of the "
        "buffer's rows are relabeled (Andrychowicz et al. 2017 and SB3's n_sampled_goal: 4).",
        4,
    )

    # --- prioritized replay (Schaul et al. 2016) ----------------------------------------
    prioritized_replay: bool = doc(
        "Prioritized experience replay, proportional variant (Schaul et al. 2016).", False
    )
    prioritized_replay_alpha: float = doc(
        "How much prioritization is used: 0 is uniform replay, 1 full prioritization.", 0.6
    )
    prioritized_replay_beta: float = doc(
        "Initial importance-sampling exponent (1 corrects the sampling bias fully).", 0.4
    )
    final_prioritized_replay_beta: float = doc(
        "Importance-sampling exponent reached after prioritized_replay_beta_annealing_timesteps.",
        1.0,
    )
    prioritized_replay_beta_annealing_timesteps: int = doc(
        "Env steps over which beta is annealed linearly to its final value.", 100_000
    )
    prioritized_replay_eps: float = doc("Added to |TD error| so that no transition's priority is zero.", 1e-6)

    def check(self, fail) -> None:
        for key in ("env_steps_per_training_step", "buffer_size", "n_step", "train_batch_size"):
            if getattr(self, key) <= 0:
                raise fail(f"training.{key}", f"expected a positive integer, got {getattr(self, key)}")
        for key in ("learning_starts", "prioritized_replay_beta_annealing_timesteps"):
            if getattr(self, key) < 0:
                raise fail(f"training.{key}", f"expected 0 or more, got {getattr(self, key)}")
        for key in ("training_intensity", "prioritized_replay_eps"):
            if getattr(self, key) <= 0:
                raise fail(f"training.{key}", f"expected a positive number, got {getattr(self, key)}")
        for key in ("prioritized_replay_alpha", "prioritized_replay_beta", "final_prioritized_replay_beta"):
            if not 0 <= getattr(self, key) <= 1:
                raise fail(f"training.{key}", f"expected a number in [0, 1], got {getattr(self, key)}")
        if self.her_k < 1:
            raise fail("training.her_k", f"expected a positive integer, got {self.her_k}")
        if self.train_batch_size > self.buffer_size:
            raise fail(
                "training.train_batch_size",
                f"the replay minibatch ({self.train_batch_size} rows) is larger than the replay buffer "
                f"(training.buffer_size: {self.buffer_size})",
            )


@dataclass
class ActorCriticReplayConfig(ReplayConfig):
    """:class:`ReplayConfig` with the defaults of the off-policy actor-critics (SAC, TD3, DDPG).

    A 1M-transition buffer and one gradient step of 256 rows per env step, after 100 random
    steps: Haarnoja et al. 2018's and Fujimoto et al. 2018's setting, and rl-baselines3-zoo's.
    """

    env_steps_per_training_step: int = doc(
        "Env steps sampled (all envs together) and added to the replay buffer per training step. "
        "Sampling goes in whole fragments of workers.rollout_fragment_length x envs env steps, so "
        "set workers.rollout_fragment_length to this / num_envs_per_worker.",
        16,
    )
    buffer_size: int = doc("Capacity of the replay buffer, in transitions.", 1_000_000)
    learning_starts: int = doc(
        "Env steps sampled with uniform random actions before the first gradient step.", 100
    )
    train_batch_size: int = doc("Replay rows per gradient step (the minibatch).", 256)
    training_intensity: float = doc(
        "Replayed rows learned from per sampled env step: each training step makes "
        "round(sampled env steps x training_intensity / train_batch_size) gradient steps "
        "(256 with a minibatch of 256: one gradient step per env step).",
        256.0,
    )
