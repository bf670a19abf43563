"""BC and MARWIL: behaviour cloning, and its advantage-weighted form (Wang et al. 2018).

One package for both, as RLlib has them: BC is MARWIL with ``beta = 0`` (every action weighs the
same) and no value function. Framework-free parts (config, returns-to-go, the trainers) live
here; the loss lives in one module per backend (``torch_policy``, ``tf_policy``).
"""

from rlgear.plugins.algorithms.marwil.config import BCConfig, MARWILConfig, MARWILLossSettings
from rlgear.plugins.algorithms.marwil.marwil import BC, MARWIL

__all__ = ["BC", "MARWIL", "BCConfig", "MARWILConfig", "MARWILLossSettings"]
