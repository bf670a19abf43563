"""The per-policy work of an evaluator: preprocessing, the observation filter, recurrent state, actions.

A :class:`PolicyCollector` serves one policy over a fixed set of *slots*: the env slots of a
single-agent env, or the (env slot, agent) pairs a multi-agent env maps to the policy. The one
sampling loop, :class:`~rlgear.sampling.sampler.Sampler` (a single-agent env is its
one-agent case), goes through it, so a policy sees the same preprocessed, filtered observations and keeps its
recurrent state per slot however many agents an env has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgear.preprocessing import ObservationPreprocessor
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.observation_filter import make_observation_filter
from rlgear.spaces import Box, Dict, MultiDiscrete, Space, Tuple, clip_action, unflatten_action
from rlgear.timestep import StepType, TimeStep

_FIRST = int(StepType.FIRST)


class PolicyCollector:
    """One policy acting on ``num_slots`` slots.

    Args:
        policy_id: the policy's id (``default`` for a single-agent run).
        policy_class: the algorithm's policy class for the backend in use.
        observation_space, action_space: the env's own spaces for these slots (the policy sees
            the preprocessed observation space).
        config: the run config as this policy sees it (its ``multiagent`` overrides applied).
        num_slots: how many slots the policy acts on (its recurrent state has one row each).
        env_name: for error messages of the preprocessing.
        policy_factory: ``(policy id, observation space, action space) -> Policy``, where the policy
            comes from: the in-process rollout worker acts with the learner's policies
            (:meth:`rlgear.learner.Learner.add_policy`); None builds the worker's own acting copy.
    """

    def __init__(
        self,
        policy_id: str,
        policy_class: type,
        observation_space: Space,
        action_space: Space,
        config: Any,
        num_slots: int,
        env_name: str,
        policy_factory: Callable[[str, Space, Space], Any] | None = None,
    ):
        self.policy_id = policy_id
        self.config = config
        self.observation_space = observation_space
        self.action_space = action_space
        self.num_slots = num_slots
        self.preprocessor = ObservationPreprocessor(observation_space, action_space, env_name)
        #: ``model.observation_filter`` (None when off): applied to every preprocessed observation.
        self.obs_filter = make_observation_filter(config.model, self.preprocessor.observation_space)
        if policy_factory is None:
            self.policy = policy_class(self.preprocessor.observation_space, action_space, config)
        else:
            self.policy = policy_factory(policy_id, self.preprocessor.observation_space, action_space)
        self.policy.defer_extras = True  # the sampler calls finish_fragment on every row it records
        space = action_space
        self.mask_blocks = space.nvec if isinstance(space, MultiDiscrete) else (getattr(space, "n", 0),)
        self.structured_actions = isinstance(space, Tuple | Dict)
        self.clip = (space.low, space.high) if isinstance(space, Box) and space.bounded else None
        #: The recurrent state per slot (empty for feed-forward policies); it lives here, not in
        #: the policy, so weight syncs never touch it, and a fresh evaluator starts from zeros.
        self.state: list[np.ndarray] = list(self.policy.get_initial_state(num_slots))

    def observe(self, ts: TimeStep, valid: np.ndarray | None = None) -> TimeStep:
        """The TimeStep the policy and the batch see: preprocessed observations and the action mask.

        ``valid`` (bool per row) keeps rows that carry no step out of the filter's statistics.
        """
        preprocessor = self.preprocessor
        if not preprocessor.identity:  # a top-level Box or Discrete reaches the policy as it is
            mask = preprocessor.action_mask(ts.observation)
            if mask is not None:
                mask = preprocessor.checked_mask(mask, ts.step_type, self.mask_blocks)
            ts = dataclasses.replace(ts, observation=preprocessor.transform(ts.observation), action_mask=mask)
        if self.obs_filter is not None:  # after the preprocessing: the filter sees what the policy sees
            ts.observation = self.obs_filter(ts.observation, ts.valid if valid is None else valid)
        return ts

    def act(
        self,
        ts: TimeStep,
        explore: bool = True,
        advance_state: bool = True,
        slots: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for ``ts``, whose rows are ``slots`` (all slots when None).

        A recurrent policy acts from each slot's state (zeros at a FIRST step) and the state-in of
        each row joins the extras (``state_in_<k>``); ``advance_state=False`` keeps the state where
        it was (a bootstrap row that is acted on again).
        """
        if not self.state:
            actions, _, extras = self.policy.compute_actions(ts, explore=explore)
            return actions, extras
        first = ts.step_type == _FIRST
        if slots is None:
            if np.count_nonzero(first):
                for array in self.state:
                    array[first] = 0.0
            state_in = self.state
        else:
            for array in self.state:
                array[slots[first]] = 0.0
            state_in = [array[slots] for array in self.state]
        actions, state, extras = self.policy.compute_actions(ts, state_in, explore=explore)
        extras = {**extras, **{SampleBatch.state_in(k): s for k, s in enumerate(state_in)}}
        if advance_state:
            if slots is None:
                self.state = [np.array(s, dtype=np.float32) for s in state]
            else:
                for array, new in zip(self.state, state, strict=True):
                    array[slots] = new
        return actions, extras

    def env_actions(self, actions: np.ndarray) -> Any:
        """What the env takes: actions clipped to a bounded Box, Tuple/Dict actions unflattened."""
        if self.structured_actions:  # batches hold flat rows, the env takes the structure
            return clip_action(self.action_space, unflatten_action(self.action_space, actions))
        return np.clip(actions, *self.clip) if self.clip is not None else actions

    def reset_state(self) -> None:
        for array in self.state:
            array[...] = 0.0


def take_rows(ts: TimeStep, rows: np.ndarray) -> TimeStep:
    """The rows ``rows`` of a (preprocessed) TimeStep."""
    return TimeStep(
        step_type=ts.step_type[rows],
        reward=ts.reward[rows],
        discount=ts.discount[rows],
        observation=ts.observation[rows],
        prev_action=ts.prev_action[rows],
        env_id=ts.env_id[rows],
        action_mask=None if ts.action_mask is None else ts.action_mask[rows],
    )
