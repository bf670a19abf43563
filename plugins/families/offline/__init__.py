"""The offline family: learning from a dataset, with no env steps (bc, marwil; cql and iql later).

An offline algorithm learns from recorded episodes (``offline.input``, a Minari dataset read by
:mod:`rlgear.offline.dataset`) instead of sampling an env. What every such algorithm shares lives
here, framework-free:

- :mod:`~rlgear.plugins.families.offline.config`: :class:`OfflineTrainingConfig`, the keys of the
  loop (``num_gradient_steps_per_iteration``, ``train_batch_size`` rows per step ...);
- :mod:`~rlgear.plugins.families.offline.data`: the dataset interface the trainer reads and the
  check of its spaces against the env's;
- :mod:`~rlgear.plugins.families.offline.observations`: dataset observations through the same
  preprocessing (and observation filter) as an env's;
- :mod:`~rlgear.plugins.families.offline.batches`: minibatches of single transitions (bc, and
  off-policy losses such as CQL's and IQL's) or of rows of whole episodes postprocessed by the
  algorithm (marwil's returns-to-go);
- :mod:`~rlgear.plugins.families.offline.offline_trainer`: :class:`OfflineTrainer`, the Trainer
  whose iteration is a number of learner updates, with evaluation episodes when ``env`` is given;
- :mod:`~rlgear.plugins.families.offline.checkpoint`: its checkpoints (no env, no workers).

An algorithm subclasses :class:`OfflineTrainer`, sets its config class and policies, and picks its
batches by overriding :meth:`OfflineTrainer.make_batches` (transitions by default).
"""

from rlgear.plugins.families.offline.batches import EpisodeBatches, TransitionBatches
from rlgear.plugins.families.offline.config import OfflineTrainingConfig
from rlgear.plugins.families.offline.offline_trainer import OfflineTrainer

__all__ = ["EpisodeBatches", "OfflineTrainer", "OfflineTrainingConfig", "TransitionBatches"]
