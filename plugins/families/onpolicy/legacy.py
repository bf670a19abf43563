"""Deprecated (0.3, goes in 0.4): the SGD loop for policies that relied on the backend running it.

Before 0.3 ``TorchPolicy.learn_on_batch`` and ``TFPolicy.learn_on_batch`` ran the epoch loop
themselves whenever the config had ``num_sgd_iter`` or ``sgd_minibatch_size``. For one release
they still do, through :func:`learn_with_legacy_keys`, with a ``DeprecationWarning`` that says
how to move to :class:`~rlgear.plugins.families.onpolicy.MinibatchSGD`. The backends reach this
module by one import each (the only backend-to-family imports; ``.importlinter`` lists them).
"""

from __future__ import annotations

import warnings
from typing import Any

from rlgear.plugins.families.onpolicy.minibatches import SGDSchedule
from rlgear.plugins.families.onpolicy.sgd import SGDPolicy, learn_with_schedule
from rlgear.sample_batch import SampleBatch

_warned: set[type] = set()


def legacy_schedule(training: Any) -> SGDSchedule:
    """The schedule the 0.2 base classes read: ``num_sgd_iter`` epochs (default 1) of
    ``sgd_minibatch_size`` rows (default, or 0: the whole batch)."""
    epochs = int(getattr(training, "num_sgd_iter", 1))
    minibatch = int(getattr(training, "sgd_minibatch_size", 0) or 0)
    return SGDSchedule(num_epochs=epochs, minibatch_size=minibatch or None)


def learn_with_legacy_keys(policy: SGDPolicy, batch: SampleBatch, base: str) -> dict[str, float]:
    """``learn_on_batch`` as the 0.2 base class ``base`` ran it; warns once per policy class."""
    cls = type(policy)
    if cls not in _warned:
        _warned.add(cls)
        warnings.warn(
            f"{cls.__module__}.{cls.__qualname__} relies on {base}.learn_on_batch running epochs of "
            "minibatches for training.num_sgd_iter / training.sgd_minibatch_size. That loop moved to the "
            "on-policy SGD family; the base class runs it for these keys until rlgear 0.4, then takes one "
            "step on the whole batch. Mix the family in: "
            f"class {cls.__name__}(MinibatchSGD, {base}) with "
            "`from rlgear.plugins.families.onpolicy import MinibatchSGD, SGDSchedule`, and give the config "
            "class a method sgd_schedule(self) returning "
            "SGDSchedule(num_epochs=self.num_sgd_iter, minibatch_size=self.sgd_minibatch_size).",
            DeprecationWarning,
            stacklevel=3,
        )
    return learn_with_schedule(policy, batch, legacy_schedule(policy.config.training))
