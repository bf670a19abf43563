"""Dataset observations as the policy sees them: the same preprocessing and filter as an env's.

A dataset holds observations as the env gave them (a dict for a Dict space ...). Online, the
rollout worker preprocesses them (:class:`~rlgear.preprocessing.ObservationPreprocessor`) and, with
``model.observation_filter: mean_std``, normalises them; a policy trained offline must see its
inputs the same way, or it could not act in the env afterwards. The filter's statistics are
those of the whole dataset (one pass when the trainer starts), frozen: evaluation episodes and
checkpoints use exactly these.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from rlgear.preprocessing import ObservationPreprocessor
from rlgear.sampling.observation_filter import MeanStdFilter, make_observation_filter
from rlgear.spaces import Space


class DatasetObservations:
    """Raw dataset observations -> model input (preprocessed, then filtered), and action masks."""

    def __init__(self, observation_space: Space, action_space: Space, model_config: Any, env_name: str):
        self.preprocessor = ObservationPreprocessor(observation_space, action_space, env_name or "dataset")
        #: The policy's observation space (what the learner's policies were built with).
        self.observation_space = self.preprocessor.observation_space
        self.obs_filter: MeanStdFilter | None = make_observation_filter(model_config, self.observation_space)
        if self.obs_filter is not None:
            self.obs_filter.frozen = True

    def fit_filter(self, episodes: Iterable[Any]) -> int:
        """Take the filter's statistics from every observation of ``episodes`` (nothing without a
        filter); returns the number of observations counted."""
        if self.obs_filter is None:
            return 0
        counted = 0
        for episode in episodes:
            features = np.asarray(self.preprocessor.transform(episode.observations))
            self.obs_filter.stats.push(features[:, self.obs_filter.passthrough :])
            counted += len(features)
        return counted

    def __call__(self, observations: Any) -> np.ndarray:
        """A batch of raw observations ``[B, ...]`` as model input: :meth:`preprocess`, then :meth:`filter`."""
        return self.filter(self.preprocess(observations))

    def preprocess(self, observations: Any) -> np.ndarray:
        """Raw observations ``[B, ...]`` in the policy's layout, before the filter (the dataset
        reader applies this once per episode it reads; :meth:`filter` runs per minibatch)."""
        return np.asarray(self.preprocessor.transform(observations))

    def filter(self, features: np.ndarray) -> np.ndarray:
        """Preprocessed observations normalised by the frozen filter (unchanged without one)."""
        if self.obs_filter is not None:
            return self.obs_filter.apply(features)
        return np.asarray(features)

    def action_mask(self, observations: Any) -> np.ndarray | None:
        """bool ``[B, n]`` allowed actions (a Dict observation's ``action_mask``), or None."""
        return self.preprocessor.action_mask(observations)
