"""Off-policy estimates of the learner's current policy, as an offline trainer reports them.

Every ``training.ope_interval`` iterations the trainer asks :class:`OffPolicyEvaluation` for
``offline/ope/<method>`` (``training.ope_methods``): the estimated expected discounted return
(``training.gamma``) of the policy's action distribution, from the first ``training.ope_episodes``
episodes of the dataset (the same episodes every time, so that estimates of successive iterations
compare). The episodes are read and turned into model inputs once, with the observation filter's
frozen statistics.

What each method needs, and what happens without it (one warning when the evaluation is built):

- ``is``, ``wis``, ``pdis``, ``pdwis``, ``dr``: the behaviour policy's ``action_logp`` in the data
  (``offline.output`` records it; Minari datasets of other origins usually have none);
- ``fqe``, ``dr``: Discrete actions (a Q-value per action);
- all: Discrete or Box actions and a feed-forward policy (``action_distribution_inputs``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlgear.plugins.families.offline import ope
from rlgear.plugins.families.offline.fqe import FittedQEvaluation
from rlgear.plugins.families.offline.target_policy import TargetPolicy
from rlgear.spaces import Discrete, Space, flatten_action

#: Result keys: ``offline/ope/<method>``.
RESULT_PREFIX = "offline/ope/"
#: Methods that weigh the data's actions by the behaviour policy's probabilities.
NEEDS_BEHAVIOUR_LOGP = frozenset({*ope.RATIO_ESTIMATORS, "dr"})
#: Methods that need a Q-model over Discrete actions.
NEEDS_Q_MODEL = frozenset({"dr", "fqe"})


@dataclass
class _Episode:
    """One dataset episode as the estimators read it (``T`` steps)."""

    features: np.ndarray  # [T + 1, F] model inputs; the last row is the observation after the last step
    actions: np.ndarray  # [T] (int for Discrete, [T, d] float for Box)
    rewards: np.ndarray  # [T] float64
    action_masks: np.ndarray | None  # [T + 1, n] or None
    behaviour_logp: np.ndarray | None  # [T] or None


class OffPolicyEvaluation:
    """Off-policy estimates (``offline/ope/*``) of a policy, on a fixed set of dataset episodes.

    ``training`` is the run's :class:`~rlgear.plugins.families.offline.OfflineTrainingConfig`;
    ``observations`` turns raw observations into model inputs (the trainer's
    :class:`~rlgear.plugins.families.offline.observations.DatasetObservations`).
    """

    def __init__(
        self,
        data: Any,
        observations: Any,
        action_space: Space,
        training: Any,
        seed: int | None,
        recurrent: bool = False,
    ):
        self.action_space = action_space
        self.recurrent = recurrent
        self.gamma = float(training.gamma)
        self.training = training
        self.seed = seed
        self.episodes: list[_Episode] = []
        for episode in data.episodes():
            if len(self.episodes) >= training.ope_episodes:
                break
            if len(episode.rewards) > 0:
                self.episodes.append(_read(episode, observations, action_space))
        self.methods = self._available(list(training.ope_methods), data)
        #: The last FQE fit (its ``losses``), for inspection.
        self.fqe: FittedQEvaluation | None = None

    def _available(self, wanted: list[str], data: Any) -> list[str]:
        """``wanted`` less what this dataset and action space cannot give, with one warning for those."""
        skipped: dict[str, str] = {}
        if self.recurrent:
            skipped.update(
                {m: "a recurrent policy's probabilities depend on its state (model.lstm)" for m in wanted}
            )
        if not TargetPolicy.supports(self.action_space):
            skipped.update(
                {
                    m: f"actions {self.action_space!r} (need Discrete or Box)"
                    for m in wanted
                    if m not in skipped
                }
            )
        if not isinstance(self.action_space, Discrete):
            reason = "Q-values per action need Discrete actions"
            skipped.update({m: reason for m in wanted if m in NEEDS_Q_MODEL and m not in skipped})
        if not all(e.behaviour_logp is not None for e in self.episodes) or not self.episodes:
            reason = "the dataset has no action_logp of the behaviour policy (record it with offline.output)"
            skipped.update({m: reason for m in wanted if m in NEEDS_BEHAVIOUR_LOGP and m not in skipped})
        if skipped:
            warnings.warn(
                "training.ope_methods: no off-policy estimate "
                + "; ".join(f"'{m}': {why}" for m, why in skipped.items()),
                stacklevel=3,
            )
        return [m for m in wanted if m not in skipped]

    def __call__(self, policy: Any) -> dict[str, float]:
        """``{"offline/ope/<method>": estimate}`` for the policy's current weights."""
        if not self.methods or not self.episodes:
            return {}
        target = TargetPolicy(policy, self.action_space)
        out: dict[str, float] = {}
        rewards = [e.rewards for e in self.episodes]
        ratios: list[np.ndarray] = []
        if any(m in NEEDS_BEHAVIOUR_LOGP for m in self.methods):
            for e in self.episodes:
                mask = None if e.action_masks is None else e.action_masks[:-1]
                target_logp = target.logp(e.features[:-1], e.actions, mask)
                ratios.append(ope.importance_ratios(target_logp, e.behaviour_logp))
        for method, estimator in ope.RATIO_ESTIMATORS.items():
            if method in self.methods:
                out[RESULT_PREFIX + method] = estimator(rewards, ratios, self.gamma)
        if any(m in NEEDS_Q_MODEL for m in self.methods):
            out.update(self._q_model_estimates(target, rewards, ratios))
        return out

    def _q_model_estimates(
        self, target: TargetPolicy, rewards: list[np.ndarray], ratios: list[np.ndarray]
    ) -> dict[str, float]:
        """FQE fitted on the episodes' transitions, its estimate and the doubly robust one."""
        probs = [
            np.exp(target.log_probs(e.features, e.action_masks)) for e in self.episodes
        ]  # pi_e(.|s_t), t = 0..T
        dones = [np.zeros(len(e.rewards), bool) for e in self.episodes]
        for done in dones:
            done[-1] = True  # the recorded episode ends here (terminated or truncated)
        training = self.training
        self.fqe = FittedQEvaluation(
            self.action_space.n,  # type: ignore[attr-defined]
            self.gamma,
            training.fqe_iterations,
            training.fqe_hidden_sizes,
            seed=self.seed,
        ).fit(
            np.concatenate([e.features[:-1] for e in self.episodes]),
            np.concatenate([e.actions for e in self.episodes]),
            np.concatenate(rewards),
            np.concatenate([e.features[1:] for e in self.episodes]),
            np.concatenate(dones),
            np.concatenate([p[1:] for p in probs]),
        )
        out: dict[str, float] = {}
        if "fqe" in self.methods:
            starts = np.stack([e.features[0] for e in self.episodes])
            start_probs = np.stack([p[0] for p in probs])
            out[RESULT_PREFIX + "fqe"] = float(np.mean(self.fqe.state_values(starts, start_probs)))
        if "dr" in self.methods:
            q_taken, state_values = [], []
            for e, p in zip(self.episodes, probs, strict=True):
                q = self.fqe.q_values(e.features[:-1])
                q_taken.append(q[np.arange(len(e.actions)), e.actions])
                state_values.append(np.sum(p[:-1] * q, axis=-1))
            out[RESULT_PREFIX + "dr"] = ope.doubly_robust(rewards, ratios, q_taken, state_values, self.gamma)
        return out


def _read(episode: Any, observations: Any, action_space: Space) -> _Episode:
    steps = len(episode.rewards)
    features = np.asarray(observations(episode.observations))[: steps + 1]
    masks = observations.action_mask(episode.observations)
    actions = episode.actions
    if isinstance(action_space, Discrete):
        actions = np.asarray(actions, np.int64).reshape(steps)
    elif not isinstance(actions, np.ndarray):
        actions = flatten_action(action_space, actions)
    logp = episode.action_logp
    return _Episode(
        features=features,
        actions=np.asarray(actions),
        rewards=np.asarray(episode.rewards, np.float64),
        action_masks=None if masks is None else np.asarray(masks, bool)[: steps + 1],
        behaviour_logp=None if logp is None else np.asarray(logp, np.float64),
    )
