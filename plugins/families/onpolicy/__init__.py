"""The on-policy SGD family: epochs of shuffled minibatches over each learner batch.

PPO, A2C and PG (and IMPALA's and APPO's passes over a learner batch) learn the same way: a
batch is gone over ``num_epochs`` times, each time in a fresh random order, cut into
minibatches, one gradient step per minibatch (Schulman et al. 2017, Algorithm 1;
Stable-Baselines3's ``PPO.train``). This family holds that loop, once, framework-free:

- :mod:`~rlgear.plugins.families.onpolicy.minibatches`: :class:`SGDSchedule`, the row indices
  of every minibatch of every epoch, drawn from the policy's own ``rng`` (whole padded
  sequences for a recurrent policy);
- :mod:`~rlgear.plugins.families.onpolicy.sgd`: :class:`MinibatchSGD`, the mixin a policy puts
  before its backend's base class (``class MyPolicy(MinibatchSGD, TorchPolicy)``), whose
  ``learn_on_batch`` runs the config's schedule through the backend's per-minibatch step
  (``learn_on_minibatches``); the config class says what the schedule is
  (``sgd_schedule()``);
- :mod:`~rlgear.plugins.families.onpolicy.legacy`: the deprecated path (until 0.4) for
  policies that relied on the backend base class running this loop.

The family imports no backend: both built-in backends' base classes provide what
:class:`~rlgear.plugins.families.onpolicy.sgd.SGDPolicy` names.
"""

from rlgear.plugins.families.onpolicy.minibatches import SGDSchedule
from rlgear.plugins.families.onpolicy.sgd import (
    MinibatchSGD,
    SGDPolicy,
    SGDScheduleConfig,
    learn_with_schedule,
)

__all__ = ["MinibatchSGD", "SGDPolicy", "SGDSchedule", "SGDScheduleConfig", "learn_with_schedule"]
