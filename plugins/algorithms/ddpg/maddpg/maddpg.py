"""MADDPG's and MATD3's trainers: DDPG's replay training step on a grouped team, and what they refuse."""

from __future__ import annotations

from rlgear.plugins.algorithms.ddpg.ddpg import DDPG
from rlgear.plugins.algorithms.ddpg.maddpg.config import MADDPGConfig, MATD3Config
from rlgear.plugins.families.replay.team import TeamTrainer


class MADDPG(TeamTrainer, DDPG):
    name = "maddpg"
    description = (
        "MADDPG: a shared decentralised deterministic actor per agent, a centralised critic on the "
        "state and the joint action (TD3's switches as options); cooperative multi-agent envs with "
        "continuous (Box) actions"
    )
    config_class: type = MADDPGConfig
    policies = {
        "torch": "rlgear.plugins.algorithms.ddpg.maddpg.torch_policy:MADDPGTorchPolicy",
        "tf": "rlgear.plugins.algorithms.ddpg.maddpg.tf_policy:MADDPGTFPolicy",
    }
    action_spaces = frozenset({"continuous"})  # each agent's; the team acts in a Box [n, A]
    multi_agent = True
    #: The rollout workers group the env's agents into one team agent (rlgear.sampling.agent_groups);
    #: the policy classes carry the same flag, which is what the workers read.
    groups_agents = True
    explores_with = "DDPG's noise per agent (training.exploration_noise)"
    network_keys = ("agent_id", "twin_q")


class MATD3(MADDPG):
    name = "matd3"
    description = (
        "MATD3: MADDPG with TD3's twin critics, delayed policy updates and target policy smoothing "
        "on; cooperative multi-agent envs with continuous (Box) actions"
    )
    config_class = MATD3Config
