"""MAPPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games"):
PPO whose value function is a centralised critic, trained with value normalization.

Per training step, as PPO's (:mod:`rlgear.plugins.algorithms.ppo.ppo`), except:
  1. the sampler adds each row's critic input (:mod:`.critic_input`) from every policy's rows of
     the fragment (:func:`add_critic_inputs`, the ``window_columns`` of :func:`postprocess`);
  2. postprocessing runs the critic once over the fragment (the actor never computed values while
     acting), denormalizes its predictions (:mod:`.value_norm`) and runs GAE on them;
  3. the policy updates the value statistics with the batch's targets, then learns PPO's loss on
     normalized targets (:class:`~rlgear.plugins.algorithms.ppo.mappo.common.CentralisedCritic`).

Shared or separate actors are the ``multiagent`` section's choice: one policy for every agent, or
one per agent; the critic input is built the same way for both.
"""

from __future__ import annotations

from typing import Any

from rlgear.config import RunConfig
from rlgear.plugins.algorithms.ppo.mappo.config import MAPPOConfig
from rlgear.plugins.algorithms.ppo.mappo.critic_input import CRITIC_OBS, add_critic_inputs
from rlgear.plugins.algorithms.ppo.ppo import PPO
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.postprocessing import add_gae, trainable_rows

#: The critic's raw (normalized) predictions, kept through GAE to become ``vf_preds`` again.
_RAW = "_critic_raw"


def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
    """GAE on the critic's (denormalized) values of the fragment's critic inputs."""
    training = config.training
    critic_obs = fragment[CRITIC_OBS]
    lead = critic_obs.shape[:-1]
    raw = policy.critic_values(critic_obs.reshape(-1, critic_obs.shape[-1])).reshape(lead)
    norm = policy.value_norm
    out = SampleBatch(fragment)
    out[SampleBatch.VF_PREDS] = raw if norm is None else norm.denormalize(raw)
    out[_RAW] = raw
    rows = trainable_rows(add_gae(out, training.gamma, training.gae_lambda))
    rows[SampleBatch.VF_PREDS] = rows.pop(_RAW)  # the loss clips around the critic's own outputs
    return rows


postprocess.window_columns = add_critic_inputs  # type: ignore[attr-defined]


class MAPPO(PPO):
    name = "mappo"
    description = (
        "Multi-agent PPO: a centralised critic on the global state or the joint observation, "
        "value normalization, shared or separate actors"
    )
    config_class = MAPPOConfig
    policies = {
        "tf": "rlgear.plugins.algorithms.ppo.mappo.tf_policy:MAPPOTFPolicy",
        "torch": "rlgear.plugins.algorithms.ppo.mappo.torch_policy:MAPPOTorchPolicy",
    }
    action_spaces = frozenset({"discrete", "continuous"})
    recurrent = False
    relational = False  # its centralised critic is a network of its own
    multi_agent = True
    #: a centralised critic sees the agents of one game; a league's players play separate games
    league_play = False
    postprocess = staticmethod(postprocess)

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        super().check_config(config)
        model = config.model
        if model.vf_share_layers:
            raise config.fail(
                "model.vf_share_layers",
                "expected false: mappo's critic is a network of its own (model.critic_hidden_sizes), "
                "on training.critic_input, not on the actor's observation",
            )
        if model.custom:
            raise config.fail(
                "model.custom", "expected null: mappo builds its actor and critic from the catalog MLP"
            )
        if model.conv_filters:
            raise config.fail(
                "model.conv_filters", "expected null: mappo's actor and critic are MLPs (no conv trunk)"
            )
        if config.exploration.name is not None:
            raise config.fail(
                "exploration.name", "expected null: mappo does not combine with exploration plugins"
            )
        if config.workers.batch_mode == "complete_episodes":
            raise config.fail(
                "workers.batch_mode",
                "expected truncate_episodes: mappo builds each row's critic input from all agents' rows "
                "of a fragment, which whole agent episodes do not have",
            )
        if config.learners.num_learners > 1:
            raise config.fail(
                "learners.num_learners",
                "expected 0 or 1: value normalization keeps one set of statistics per policy, which "
                "several learners would each update on their own shard",
            )
