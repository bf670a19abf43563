"""MADDPG (Lowe et al. 2017) and MATD3: DDPG/TD3 with decentralised actors and a centralised critic.

The env's agents are grouped into one team (:mod:`rlgear.sampling.agent_groups`, a Box team action
``[n, A]``). One actor, shared by every agent (parameter sharing, as PyMARL/EPyMARL), maps an agent's
own observation and one-hot index to that agent's action; the critic ``Q(s, a_1..a_n)`` reads the
team's global state and every agent's action. Each agent's actor gradient goes through the critic
with only its own action replaced by the actor's and the others' kept as replayed (MADDPG's
gradient), not with the whole joint action replaced (which would be single-agent DDPG on the joint
action). The team reward is the agents' summed reward: this is cooperative MADDPG; per-agent
critics for competitive or mixed games are not built. The training step, replay and target
updates are DDPG's (:mod:`rlgear.plugins.algorithms.ddpg`).
"""

from rlgear.plugins.algorithms.ddpg.maddpg.config import MADDPGConfig, MATD3Config
from rlgear.plugins.algorithms.ddpg.maddpg.maddpg import MADDPG, MATD3

__all__ = ["MADDPG", "MATD3", "MADDPGConfig", "MATD3Config"]
