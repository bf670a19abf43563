"""simple_pg: REINFORCE with a learned value baseline (Williams 1992).

Layout, the same as rlgear's built-in algorithms:

* ``config.py``       hyperparameters (a ``TrainingConfig`` subclass);
* ``simple_pg.py``    the framework-free part: postprocessing and the training step;
* ``torch_policy.py`` the loss on the torch backend, imported only when a run uses torch.
"""

from rlgear_legacy.simple_pg.config import SimplePGConfig
from rlgear_legacy.simple_pg.simple_pg import SimplePG

__all__ = ["SimplePG", "SimplePGConfig"]
