"""MASAC: SAC with decentralised actors and a centralised critic, MADDPG's team learner made soft.

The env's agents are grouped into one team (:mod:`rlgear.sampling.agent_groups`, a Box team action
``[n, A]``), as for ``maddpg``. One squashed-Gaussian actor, shared by every agent (parameter
sharing, with each agent's one-hot index), samples an agent's action from its own observation; twin
critics ``Q_k(s, a_1..a_n)`` read the team's global state and every agent's action. The soft target
subtracts ``alpha`` times the team's log-probability (the agents' summed: their policies are
independent given the state); each agent's actor gradient goes through the critics with only its
own action sampled and the others' kept as replayed (MADDPG's gradient, Lowe et al. 2017, with
SAC's entropy-regularised objective, Haarnoja et al. 2018); the temperature is one for the team,
tuned towards an entropy per agent. The team reward is the agents' summed: cooperative, as
``maddpg``. The training step, replay and target updates are SAC's.
"""

from rlgear.plugins.algorithms.sac.masac.config import MASACConfig
from rlgear.plugins.algorithms.sac.masac.masac import MASAC

__all__ = ["MASAC", "MASACConfig"]
