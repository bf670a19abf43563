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
:class:`~rlgear.plugins.families.replay.replay_trainer.ReplayTrainer`; the env's agents become one
team agent in the rollout workers (the policies set ``groups_agents``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlgear import config as config_mod
from rlgear.config import RunConfig, multiagent
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.qmix.acting import team_spaces
from rlgear.plugins.algorithms.qmix.config import QMixConfig, VDNConfig
from rlgear.plugins.algorithms.qmix.episodes import postprocess_episode
from rlgear.plugins.families.replay.replay_trainer import ReplayTrainer

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


class QMIX(ReplayTrainer):
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
                config.model.observation_filter != "none",
                "model.observation_filter",
                f"{cls.name}'s team observation holds presence flags and padding a filter would shift; set it to none",
            ),
            (
                config.exploration.name is not None,
                "exploration.name",
                f"{cls.name} explores epsilon-greedily per agent (training.epsilon_*); remove the key",
            ),
            (
                config.learners.num_learners > 0,
                "learners.num_learners",
                f"{cls.name} learns in the driver; set it to 0",
            ),
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

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        self.last_target_update = 0  # timesteps_total when the target networks were last copied
        self.num_target_updates = 0

    def training_step(self) -> dict[str, float]:
        stats = super().training_step()
        stats.update(
            self.learner_stats({f"{pid}/epsilon": p.epsilon() for pid, p in self.policy_map.items()})
        )
        stats["num_target_updates"] = float(self.num_target_updates)
        return stats

    def after_learning(self, timesteps: int) -> dict[str, float]:
        """Every ``target_network_update_freq`` env steps, copy the online networks into the targets."""
        if timesteps - self.last_target_update >= self.config.training.target_network_update_freq:
            self.policy.update_target(1.0)
            self.last_target_update = timesteps
            self.num_target_updates += 1
        return {}

    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """As :meth:`ReplayTrainer.reset_config`; False also when the networks or the episode rows
        would have to change (:data:`NETWORK_KEYS`)."""
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.training, new_config.training
        if any(getattr(old, key) != getattr(new, key) for key in NETWORK_KEYS):
            return False
        return super().reset_config(new_config)

    # --- checkpoints -----------------------------------------------------------------------
    def get_algorithm_state(self) -> dict[str, Any]:
        return {
            "last_target_update": self.last_target_update,
            "num_target_updates": self.num_target_updates,
            **super().get_algorithm_state(),
        }

    def set_algorithm_state(self, state: dict[str, Any]) -> None:
        self.last_target_update = int(state.get("last_target_update", 0))
        self.num_target_updates = int(state.get("num_target_updates", 0))
        super().set_algorithm_state(state)


class VDN(QMIX):
    name = "vdn"
    description = (
        "VDN: per-agent GRU Q-networks whose sum is the team's value; episodic replay, double-Q "
        "targets; cooperative multi-agent envs with discrete actions"
    )
    config_class = VDNConfig
