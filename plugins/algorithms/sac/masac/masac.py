"""MASAC's trainer: SAC's replay training step on a grouped team, and what it refuses."""

from __future__ import annotations

from rlgear.plugins.algorithms.sac.masac.config import MASACConfig
from rlgear.plugins.algorithms.sac.sac import SAC
from rlgear.plugins.families.replay.team import TeamTrainer


class MASAC(TeamTrainer, SAC):
    name = "masac"
    description = (
        "MASAC: a shared decentralised squashed-Gaussian actor per agent, twin centralised critics on "
        "the state and the joint action, one tuned temperature; cooperative multi-agent envs with "
        "continuous (Box) actions"
    )
    config_class: type = MASACConfig
    policies = {
        "torch": "rlgear.plugins.algorithms.sac.masac.torch_policy:MASACTorchPolicy",
        "tf": "rlgear.plugins.algorithms.sac.masac.tf_policy:MASACTFPolicy",
    }
    action_spaces = frozenset({"continuous"})  # each agent's; the team acts in a Box [n, A]
    multi_agent = True
    #: The rollout workers group the env's agents into one team agent (rlgear.sampling.agent_groups);
    #: the policy class carries the same flag, which is what the workers read.
    groups_agents = True
    explores_with = "each agent's squashed Gaussian, as SAC (training.initial_alpha, tune_alpha)"
    network_keys = ("agent_id",)
