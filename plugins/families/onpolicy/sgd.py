"""The on-policy SGD loop: a policy's ``learn_on_batch`` as epochs of minibatch gradient steps.

A policy joins the family by mixing :class:`MinibatchSGD` in before its backend's base class,
and its algorithm's config class says how many epochs of which minibatches
(:class:`SGDScheduleConfig`)::

    @dataclass
    class MyConfig(TrainingConfig):
        num_sgd_iter: int = doc("Epochs over each train batch.", 10)
        sgd_minibatch_size: int = doc("Rows per SGD minibatch.", 64)

        def sgd_schedule(self) -> SGDSchedule:
            return SGDSchedule(num_epochs=self.num_sgd_iter, minibatch_size=self.sgd_minibatch_size)


    class MyTorchPolicy(MinibatchSGD, TorchPolicy):
        def loss(self, batch): ...

The backend does each step (loss, gradients, clipping, the non-finite guard, the optimizer)
through its base class' ``learn_on_minibatches``; this module decides only which rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from rlgear.plugins.families.onpolicy.minibatches import SGDSchedule
from rlgear.sample_batch import SampleBatch


@runtime_checkable
class SGDScheduleConfig(Protocol):
    """A ``training`` config class whose algorithm learns by minibatch SGD declares its schedule."""

    def sgd_schedule(self) -> SGDSchedule:
        """The epochs and minibatch size of one ``learn_on_batch``, from this config's keys."""
        ...


class SGDPolicy(Protocol):
    """What the loop needs of a policy; ``TorchPolicy`` and ``TFPolicy`` provide it."""

    config: Any
    #: The minibatch order's generator (the policy's own, saved in its checkpoint state).
    rng: np.random.Generator
    #: Rows a minibatch keeps together (``max_seq_len`` for padded recurrent sequences, else 1).
    rows_per_sequence: int

    def learn_on_minibatches(self, batch: SampleBatch, minibatches: Iterable[np.ndarray]) -> dict[str, float]:
        """One gradient step per array of row indices; the steps' mean stats."""
        ...


def learn_with_schedule(policy: SGDPolicy, batch: SampleBatch, schedule: SGDSchedule) -> dict[str, float]:
    """Every gradient step of ``schedule`` on ``batch``, minibatches drawn from ``policy.rng``."""
    minibatches = schedule.minibatches(policy.rng, len(batch), policy.rows_per_sequence)
    return policy.learn_on_minibatches(batch, minibatches)


class MinibatchSGD:
    """Mixed in before a backend's base policy class: ``learn_on_batch`` runs the SGD schedule.

    The schedule is :meth:`sgd_schedule`: by default the config's
    (``config.training.sgd_schedule()``, checked when the policy is built). Mixins that act
    around learning (PPO's clip variable on TF, APPO's KL coefficient) go before this one and
    call ``super().learn_on_batch``.
    """

    config: Any

    def __init__(self, observation_space: Any, action_space: Any, config: Any):
        if not isinstance(config.training, SGDScheduleConfig):
            cls = type(config.training)
            raise TypeError(
                f"{type(self).__name__} learns by minibatch SGD (it mixes in MinibatchSGD), but its config "
                f"class {cls.__module__}.{cls.__qualname__} has no sgd_schedule() method: add one returning "
                "rlgear.plugins.families.onpolicy.SGDSchedule(num_epochs=..., minibatch_size=...)"
            )
        super().__init__(observation_space, action_space, config)

    def sgd_schedule(self) -> SGDSchedule:
        """The epochs and minibatch size of the next ``learn_on_batch`` (read every call, so a
        live config change, as PBT makes, applies at once)."""
        return self.config.training.sgd_schedule()

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        return learn_with_schedule(self, batch, self.sgd_schedule())
