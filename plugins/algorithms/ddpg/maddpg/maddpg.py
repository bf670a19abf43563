"""MADDPG's and MATD3's trainers: DDPG's replay training step on a grouped team, and what they refuse."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlgear import config as config_mod
from rlgear.config import RunConfig
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.ddpg.ddpg import DDPG
from rlgear.plugins.algorithms.ddpg.maddpg.config import MADDPGConfig, MATD3Config
from rlgear.plugins.families.replay.team import team_learner_refusals, team_spaces

#: Keys that shape the networks (the actor's input, the number of critics): reset_config() refuses them.
NETWORK_KEYS = ("agent_id", "twin_q")


class MADDPG(DDPG):
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

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Refuse what the team learner does not build, naming the key."""
        super().check_config(config)
        refusals = team_learner_refusals(
            config, cls.name, "DDPG's noise per agent (training.exploration_noise)"
        )
        for refused, key, message in refusals:
            if refused:
                raise config.fail(key, message)

    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """As DDPG's; False also when a key of :data:`NETWORK_KEYS` changes (the networks are built once)."""
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.training, new_config.training
        if any(getattr(old, key) != getattr(new, key) for key in NETWORK_KEYS):
            return False
        return super().reset_config(new_config)

    @classmethod
    def check_spaces(cls, config: RunConfig, observation_space: Any, action_space: Any) -> None:
        """The spaces of a grouped Box team (the rollout workers group every env, a single-agent one as
        a team of one; Discrete or unequal action spaces are refused there)."""
        try:
            team_spaces(observation_space, action_space, cls.name)
        except TypeError as err:
            raise UnsupportedError(f"algorithm '{cls.name}', env '{config.env.name}': {err}") from None


class MATD3(MADDPG):
    name = "matd3"
    description = (
        "MATD3: MADDPG with TD3's twin critics, delayed policy updates and target policy smoothing "
        "on; cooperative multi-agent envs with continuous (Box) actions"
    )
    config_class = MATD3Config
