"""The Policy contract: acting, learning, and moving weights and state around.

Each backend provides a base class implementing this (``TorchPolicy`` ...);
each algorithm provides, per backend it supports, a small subclass holding its
network head and loss. Everything that crosses a process boundary or goes into
a checkpoint is numpy: weights are a flat ``{name: array}`` dict with
framework-neutral names (dense kernels are ``[in, out]``), so weights move
between backends and into safetensors files unchanged.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete, Space
from rlgear.timestep import TimeStep


def recurrent_model(model_config: Any) -> bool:
    """Whether the catalog model of ``model_config`` carries a recurrent state: an LSTM
    (``model.lstm``) or attention memory (``model.attention``)."""
    return bool(getattr(model_config, "lstm", False) or getattr(model_config, "attention", False))


@dataclass
class PolicyState:
    """Everything needed to continue training exactly: arrays for safetensors, the rest JSON.

    ``arrays`` holds weights under ``weights/<name>`` and optimizer tensors under
    ``optimizer/...``; ``meta`` holds JSON-able values (optimizer hyperparameters,
    counters).
    """

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


class Policy(ABC):
    """Maps TimeSteps to actions and learns from SampleBatches.

    Args:
        observation_space, action_space: the env's spaces (rlgear.spaces).
        config: the resolved :class:`~rlgear.config.RunConfig` (``training``
            holds the algorithm's hyperparameters, ``model`` the network).
    """

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.global_timestep = 0
        self.nonfinite = NonFiniteGuard()

    #: True for a recurrent policy (``model.lstm``, ``model.attention``): the evaluator then carries its state per env
    #: slot, stores it in the batch (``state_in_<k>``) and cuts rows into sequences
    #: (:mod:`rlgear.sampling.sequences`) of ``max_seq_len`` rows.
    recurrent: bool = False
    max_seq_len: int = 0

    def get_initial_state(self, batch_size: int) -> list[np.ndarray]:
        """The recurrent state at an episode's FIRST step, for ``batch_size`` env slots.

        A list of float32 arrays ``[batch_size, ...]`` (the LSTM: ``[h, c]``, each
        ``[B, cell]``, zeros); empty for a feed-forward policy.
        """
        return []

    def learner_columns(self, loss_columns: tuple[str, ...]) -> tuple[str, ...]:
        """The batch columns a backend hands its loss: ``loss_columns``, the action mask (losses
        build their distributions with it) and, for a recurrent policy, what its model reads
        along the sequences (the padding mask, the state-in, and the previous action and reward
        when ``model.lstm_use_prev_*`` asks for them). Framework-free, so every backend shares it.
        """
        if not self.recurrent:
            return (*loss_columns, SampleBatch.ACTION_MASK)
        extra = (
            SampleBatch.ACTION_MASK,
            SampleBatch.SEQ_MASK,
            SampleBatch.state_in(0),
            SampleBatch.state_in(1),
        )
        if self.config.model.lstm_use_prev_action:
            extra += (SampleBatch.PREV_ACTIONS,)
        if self.config.model.lstm_use_prev_reward:
            extra += (SampleBatch.REWARDS,)
        return tuple(dict.fromkeys((*loss_columns, *extra)))

    @abstractmethod
    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        """Actions for a batch of TimeSteps.

        Returns ``(actions, state, extras)``: ``actions`` is ``[B, *action_shape]``
        (unclipped: the evaluator clips to the action bounds before stepping),
        ``state`` is the recurrent state after this step (a list like
        :meth:`get_initial_state`'s; a recurrent policy given ``state=None``
        starts from zeros; feed-forward policies return what they were given),
        and ``extras`` holds per-row arrays the evaluator stores in the batch
        (``action_logp``, ``vf_preds`` ...). The caller resets a slot's state
        at its FIRST step; the policy does not look at step types.

        An extra that is cheaper computed over many rows at once than step by step may be left
        out here when :attr:`defer_extras` is set, and filled in by :meth:`finish_fragment`, which
        the evaluator calls on the recorded rows before anything else reads them.
        """

    #: Set by the evaluator that records this policy's rows (it calls :meth:`finish_fragment` on every
    #: row it records): :meth:`compute_actions` may then leave out what that fills in. False for any
    #: other caller, who gets every extra from :meth:`compute_actions` itself.
    defer_extras: bool = False

    def finish_fragment(self, columns: dict[str, np.ndarray]) -> None:
        """Complete, in place, the extras :meth:`compute_actions` left out, on recorded rows
        (``[T, B, ...]`` columns, or one step's ``[B, ...]``) acted on with the current weights.

        Why: acting is on the critical path of every env step; a column such as the log-probability
        of the sampled action is one batched numpy call for a whole fragment, but several calls per
        step. The default does nothing.
        """

    @abstractmethod
    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """Update the weights from a postprocessed batch; return learner statistics."""

    @abstractmethod
    def get_weights(self) -> dict[str, np.ndarray]:
        """A flat ``{name: array}`` copy of the weights (framework-neutral names)."""

    @abstractmethod
    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load weights produced by ``get_weights`` (of this or another backend)."""

    @abstractmethod
    def get_state(self) -> PolicyState:
        """Weights, optimizer state and counters, for checkpoints."""

    @abstractmethod
    def set_state(self, state: PolicyState) -> None:
        """Restore what ``get_state`` returned."""

    def to_device(self, device: str) -> None:
        """Learn on ``device`` (``"cpu"``, ``"cuda:0"``, ``"mps"``), as :class:`~rlgear.learner.Learner`
        resolves ``learners.device``: the model(s) and the optimizer state move there.

        This base accepts ``"cpu"`` (where a policy starts) and refuses anything else: a policy with
        no framework (numpy) has nothing to move. The backends' base classes override it.
        """
        if device != "cpu":
            from rlgear.errors import UnsupportedError

            raise UnsupportedError(
                f"{type(self).__name__} learns on the CPU only (it has no framework model to move), "
                f"so learners.device {device!r} cannot apply to it: use learners.device: cpu or auto"
            )

    def set_global_timestep(self, timestep: int) -> None:
        """Called by the trainer before learning, for schedules over timesteps_total."""
        self.global_timestep = int(timestep)

    def update_config(self, config: Any) -> None:
        """Take new hyperparameters in place (``Trainer.reset_config``); weights are kept."""
        self.config = config

    def reseed(self, seed: int) -> None:
        """Fresh random streams from ``seed`` for what this policy draws (minibatch order, action noise).

        Why: a PBT exploit restores a donor's whole state, its RNG states
        included; two trials that took the same donor would then draw the same
        numbers to the end and waste half their compute. The default gives every
        numpy ``Generator`` held by the policy (or its ``fast_actor``) a new one
        seeded from ``(seed, attribute name)``; a policy with other randomness
        overrides this.
        """
        for owner in (self, getattr(self, "fast_actor", None)):
            if owner is None:
                continue
            for name, value in list(vars(owner).items()):
                if isinstance(value, np.random.Generator):
                    setattr(owner, name, np.random.default_rng([int(seed), zlib.crc32(name.encode())]))


class NonFiniteGuard:
    """Counts updates skipped for a non-finite loss or gradient, and stops a run that keeps making them.

    Why: one NaN applied to the weights poisons every later update (and every
    checkpoint after it). Skipping that update keeps the last finite weights;
    a few in a row are survivable (one bad batch), many in a row mean training
    has diverged or its data is broken, and going on would only waste compute.
    """

    def __init__(self) -> None:
        self.total = 0  # over the run (saved with the policy's state)
        self.in_a_row = 0

    def record(self, finite: bool, limit: int, detail: str = "") -> None:
        """Note one update; raise :class:`~rlgear.errors.NonFiniteError` at ``limit`` skipped in a row."""
        if finite:
            self.in_a_row = 0
            return
        self.total += 1
        self.in_a_row += 1
        if self.in_a_row >= limit:
            from rlgear.errors import NonFiniteError

            raise NonFiniteError(
                f"{self.in_a_row} updates in a row had a non-finite loss or gradient{detail} "
                f"(training.max_nonfinite_updates is {limit}); each was skipped, so the weights are still "
                "the last finite ones. Likely causes: NaN, infinite or huge rewards or observations from the "
                "env, or a learning rate too high (training.lr)"
            )


def all_finite(arrays: Any) -> bool:
    """True when every float array in ``arrays`` (a mapping or a sequence) is free of NaN and infinity."""
    values = arrays.values() if isinstance(arrays, dict) else arrays
    return all(np.isfinite(a).all() for a in (np.asarray(v) for v in values) if a.dtype.kind == "f")


def flatten_observations(space: Space, observations: np.ndarray) -> np.ndarray:
    """``[B, *shape]`` observations as ``[B, features]`` float32 (one-hot for Discrete)."""
    if isinstance(space, Discrete):
        obs = np.asarray(observations, dtype=np.int64).reshape(-1)
        out = np.zeros((obs.shape[0], space.n), dtype=np.float32)
        out[np.arange(obs.shape[0]), obs] = 1.0
        return out
    obs = np.asarray(observations)
    return obs.reshape(obs.shape[0], -1).astype(np.float32, copy=False)


def action_dim(space: Space) -> int:
    """Width of the distribution inputs' leading part: logits for Discrete, means for Box."""
    if isinstance(space, Discrete):
        return space.n
    if isinstance(space, Box):
        return space.size
    raise TypeError(f"unsupported action space {space!r}")


def epsilon_greedy_actions(
    q_values: np.ndarray, epsilon: float, rng: np.random.Generator, action_mask: np.ndarray | None = None
) -> np.ndarray:
    """int64 ``[B]``: the best allowed action per row, replaced by a uniformly random allowed one
    with probability ``epsilon`` (DQN's acting, written once for every backend).

    ``action_mask`` (bool ``[B, n]``) gives disallowed actions Q = -inf, and random actions
    are drawn among the allowed ones only.
    """
    q_values = np.asarray(q_values)
    if action_mask is not None:
        q_values = np.where(action_mask, q_values, -np.inf)
    actions = np.argmax(q_values, axis=-1)
    if epsilon > 0:
        n = actions.shape[0]
        explore_rows = rng.random(n) < epsilon
        if action_mask is None:
            random_actions = rng.integers(q_values.shape[-1], size=n)
        else:  # the largest of uniform draws over allowed actions is a uniform allowed action
            random_actions = np.argmax(np.where(action_mask, rng.random(q_values.shape), -1.0), axis=-1)
        actions = np.where(explore_rows, random_actions, actions)
    return actions.astype(np.int64, copy=False)


def categorical_sample(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """int64 ``[B]``: one draw per row from ``softmax(logits)`` (inverse CDF, one uniform per row):
    discrete SAC's acting, written once for its backends and ``rlgear.inference``."""
    logits = logits.astype(np.float64)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    cdf = np.cumsum(probs, axis=-1)
    u = rng.random((logits.shape[0], 1)) * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=-1), logits.shape[-1] - 1).astype(np.int64)
