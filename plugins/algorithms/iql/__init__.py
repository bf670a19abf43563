"""IQL: implicit Q-learning from a dataset (Kostrikov et al. 2021), discrete and continuous actions.

Three losses that never query an action the dataset did not take: an expectile regression of
``V(s)`` on the target critics' ``Q(s, a_data)``, a TD regression of ``Q(s, a)`` on
``r + gamma V(s')``, and advantage-weighted regression of the actor on ``exp(beta (Q - V))``.
The loop is the offline family's; the losses are in ``torch_policy`` / ``tf_policy``.
"""

from rlgear.plugins.algorithms.iql.config import IQLConfig
from rlgear.plugins.algorithms.iql.iql import IQL

__all__ = ["IQL", "IQLConfig"]
