"""QMIX's and VDN's training step, written once for every backend.

Per training step:
  1. act epsilon-greedily per agent (the GRU state carried per env slot, reset at FIRST) until at
     least ``env_steps_per_training_step`` env steps of whole team episodes were sampled, and store
     each episode as one replay row (:mod:`~rlgear.plugins.algorithms.qmix.episodes`);
  2. once ``learning_starts`` env steps were sampled, take
     ``round(sampled steps x training_intensity / train_batch_size)`` gradient steps, each on
     ``train_batch_size`` episodes replayed uniformly;
  3. every ``target_network_update_freq`` env steps, copy the agent network and the mixer into
     their target networks;
  4. send the new weights to the rollout workers.

Steps 1, 2 and 4, the replay buffer and its checkpointing are the replay family's
:class:`~rlgear.plugins.families.replay.replay_trainer.ReplayTrainer`, step 3 the family's
:class:`~rlgear.plugins.families.replay.q_learning.QLearningTrainer`; the env's agents become one
team agent in the rollout workers (the policies set ``groups_agents``).
"""

from __future__ import annotations

from typing import Any

from rlgear.config import RunConfig, multiagent
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.qmix.acting import team_spaces
from rlgear.plugins.algorithms.qmix.config import QMixConfig, VDNConfig
from rlgear.plugins.algorithms.qmix.episodes import postprocess_episode
from rlgear.plugins.families.replay.q_learning import QLearningTrainer
from rlgear.sampling.agent_groups import team_refusals

#: Keys that shape the networks or the replay rows: reset_config() refuses to change them.
NETWORK_KEYS = (
    "mixer",
    "rnn_hidden_dim",
    "obs_last_action",
    "obs_agent_id",
    "mixing_embed_dim",
    "hypernet_layers",
    "hypernet_embed",
    "max_episode_len",
)


class QMIX(QLearningTrainer):
    name = "qmix"
    description = (
        "QMIX: per-agent GRU Q-networks mixed monotonically by hypernetworks on the global state; "
        "episodic replay, double-Q targets; cooperative multi-agent envs with discrete actions"
    )
    config_class: type = QMixConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.qmix.tf_policy:QMixTFPolicy",
        "torch": "rlgear.plugins.algorithms.qmix.torch_policy:QMixTorchPolicy",
    }
    action_spaces = frozenset({"discrete"})  # each agent's; the team acts in a MultiDiscrete
    multi_agent = True
    recurrent = True  # the GRU agent network is built in (model.lstm is refused)
    #: The rollout workers group the env's agents into one team agent (rlgear.sampling.agent_groups);
    #: the policy classes carry the same flag, which is what the workers read.
    groups_agents = True
    network_keys = NETWORK_KEYS
    reads_datasets = False
    #: rlgear plugins --check runs CartPole (a team of one agent), whose episodes last up to 500 steps.
    check_overrides = {"workers": {"batch_mode": "complete_episodes"}, "training": {"max_episode_len": 500}}
    postprocess = staticmethod(postprocess_episode)

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Refuse what the team learner does not build, naming the key."""
        super().check_config(config)
        ids = multiagent.policy_ids(config)
        refusals = (
            (
                config.workers.batch_mode != "complete_episodes",
                "workers.batch_mode",
                f"{cls.name} stores and replays whole team episodes: set it to complete_episodes "
                f"(it is {config.workers.batch_mode})",
            ),
            (
                len(ids) > 1,
                "multiagent.policies",
                f"{cls.name} learns one team policy for all agents; the config names {len(ids)} ({', '.join(ids)})",
            ),
            (
                bool(config.model.lstm),
                "model.lstm",
                f"{cls.name}'s agent network is recurrent already (a GRU of training.rnn_hidden_dim units); "
                "set it to false",
            ),
            (
                bool(config.model.attention),
                "model.attention",
                f"{cls.name}'s agent network is recurrent already (a GRU of training.rnn_hidden_dim units); "
                "set it to false",
            ),
            (
                bool(config.model.conv_filters),
                "model.conv_filters",
                f"{cls.name} flattens each agent's observation into a row: conv nets are not built",
            ),
            (
                bool(config.model.custom),
                "model.custom",
                f"{cls.name} builds its own agent network and mixer (training.rnn_hidden_dim, mixing_embed_dim)",
            ),
            (
                config.exploration.name is not None,
                "exploration.name",
                f"{cls.name} explores epsilon-greedily per agent (training.epsilon_*); remove the key",
            ),
            *team_refusals(config, cls.name),
        )
        for refused, key, message in refusals:
            if refused:
                raise config.fail(key, message)

    @classmethod
    def check_spaces(cls, config: RunConfig, observation_space: Any, action_space: Any) -> None:
        """The spaces of a grouped team (the rollout workers group every env, a single-agent one as a
        team of one; agents with different action spaces are refused there)."""
        try:
            team_spaces(observation_space, action_space)
        except TypeError as err:  # the rollout workers group every env, so this is a policy built elsewhere
            raise UnsupportedError(f"algorithm '{cls.name}', env '{config.env.name}': {err}") from None

    def update_targets(self) -> None:
        """Copy the online agent network and mixer into their targets (PyMARL's hard update)."""
        self.policy.update_target(1.0)


class VDN(QMIX):
    name = "vdn"
    description = (
        "VDN: per-agent GRU Q-networks whose sum is the team's value; episodic replay, double-Q "
        "targets; cooperative multi-agent envs with discrete actions"
    )
    config_class = VDNConfig
