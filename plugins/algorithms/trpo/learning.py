"""TRPO's ``learn_on_batch``, framework-free: one natural-gradient policy step, then the value epochs.

Mixed in before a backend's base policy class (``class TRPOTorchPolicy(TRPOLearning, TorchPolicy)``).
The policy step is :func:`~rlgear.plugins.algorithms.trpo.natural_gradient.natural_gradient_step` on
the backend's :class:`~rlgear.plugins.algorithms.trpo.natural_gradient.PolicyStepProblem`; the value
function is then fitted separately (Schulman et al. 2015, section 8; sb3-contrib's critic loop):
``vf_num_sgd_iter`` epochs of ``vf_sgd_minibatch_size``-row minibatches of ``0.5 (V(s) - target)^2``
through the backend's own minibatch step (``learn_on_minibatches``: the policy's ``loss()`` is the
value loss, and its optimizer holds only the value net's weights). Policy and value nets must be
separate (:func:`split_weight_names`; an image trunk steps with the policy), or a value step would
move the policy out of its trust region.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from rlgear.errors import ConfigError
from rlgear.plugins.algorithms.trpo.natural_gradient import (
    PolicyStepProblem,
    natural_gradient_step,
    normalized_advantages,
)
from rlgear.plugins.families.onpolicy import SGDSchedule
from rlgear.sample_batch import SampleBatch

#: the batch columns TRPO's policy step and value loss read
TRPO_COLUMNS = (
    SampleBatch.OBS,
    SampleBatch.ACTIONS,
    SampleBatch.ACTION_LOGP,
    SampleBatch.ADVANTAGES,
    SampleBatch.VALUE_TARGETS,
)


#: The conv trunk of image observations (``model.conv_filters``): read by both heads, stepped with the policy.
TRUNK_PREFIX = "shared/conv_"


def split_weight_names(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """The model's neutral weight names as ``(policy step, value fit)``.

    The policy step takes ``policy/...`` and, with image observations, the conv trunk both heads
    read (``shared/conv_<i>/...``): the natural gradient and the KL line search then cover every
    weight that shapes the policy, so the step stays in its trust region. The value fit takes
    ``value/...`` only: it learns on the trunk's features without moving them (sb3-contrib's TRPO
    lets its value optimizer move a shared feature extractor too, which moves the policy after its
    line search). Any other weight (``shared/hidden_*`` of ``model.vf_share_layers``, or a custom
    model's own names) would have to belong to both steps, so TRPO refuses the model.
    """
    policy, value, other = [], [], []
    for name in names:
        if name.startswith(("policy/", TRUNK_PREFIX)):
            policy.append(name)
        elif name.startswith("value/"):
            value.append(name)
        else:
            other.append(name)
    if other or not any(n.startswith("policy/") for n in policy) or not value:
        raise ConfigError(
            "model: trpo needs separate policy and value networks (weights named policy/... and "
            f"value/..., besides an image trunk shared/conv_*), so that fitting the value function "
            f"leaves the policy step's trust region alone; this model has "
            f"{other or 'no policy/ or value/ weights'} (set model.vf_share_layers: false)"
        )
    return policy, value


class TRPOLearning:
    """``learn_on_batch`` as TRPO: see the module docstring. The backend class provides
    :meth:`policy_step_problem` and ``learn_on_minibatches``."""

    config: Any
    rng: np.random.Generator
    nonfinite: Any
    num_grad_updates: int
    weights_version: int
    #: the backend base class's: one gradient step of ``loss()`` per array of row indices
    learn_on_minibatches: Any

    def policy_step_problem(self, batch: SampleBatch) -> PolicyStepProblem:
        """This batch's policy step, on the backend's tensors."""
        raise TypeError(f"{type(self).__name__} must implement policy_step_problem()")

    def policy_step(self, batch: SampleBatch) -> dict[str, float]:
        """The natural-gradient step on ``batch``, or on every ``sub_sampling_factor``-th row of it
        (advantages normalized first, over those rows, when configured: sb3-contrib's order)."""
        training = self.config.training
        if training.sub_sampling_factor > 1:
            batch = batch.select(np.arange(0, len(batch), training.sub_sampling_factor))
        if training.normalize_advantages:
            batch = normalized_advantages(batch)
        stats = natural_gradient_step(self.policy_step_problem(batch), training)
        finite = bool(stats.pop("finite"))
        self.nonfinite.record(
            finite, training.max_nonfinite_updates, " (the policy step's gradient or direction)"
        )
        if stats["step_accepted"]:
            self.num_grad_updates += 1
            self.weights_version += 1
        return stats

    def fit_value_function(self, batch: SampleBatch) -> dict[str, float]:
        """``vf_num_sgd_iter`` epochs of minibatch steps on the value loss; their mean stats."""
        training = self.config.training
        schedule = SGDSchedule(
            num_epochs=training.vf_num_sgd_iter, minibatch_size=training.vf_sgd_minibatch_size
        )
        stats = self.learn_on_minibatches(batch, schedule.minibatches(self.rng, len(batch)))
        stats.pop("total_loss", None)  # the value loss itself
        if "grad_gnorm" in stats:
            stats["vf_grad_gnorm"] = stats.pop("grad_gnorm")
        return stats

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        stats = self.policy_step(batch)
        stats.update(self.fit_value_function(batch))
        return stats
