"""What the centralised-critic team learners (``maddpg``, ``matd3``, ``masac``) share, framework-free:
the team's spaces, the shared actor's inputs, acting, and what their trainers refuse.

It lives in the replay family, not in one algorithm's package, because algorithms never import each
other (``.importlinter``): MADDPG (a DDPG) and MASAC (a SAC) both build on it. Acting is numpy for
the reason DDPG's and SAC's is (:mod:`rlgear.blocks.squashed_inference`): a few rows per env step
through a small MLP. The team observation ``[B, n + 1, W]`` is split by
:class:`~rlgear.sampling.agent_groups.TeamLayout`; the shared actor sees each agent's own row (and
its one-hot index) only, so an agent's action never depends on another agent's observation
(decentralised execution); the critic alone reads the state row and the joint action.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlgear import config as config_mod
from rlgear.config import RunConfig, multiagent
from rlgear.errors import UnsupportedError
from rlgear.sampling.agent_groups import TeamLayout, team_layout, team_refusals
from rlgear.spaces import Box, Space
from rlgear.timestep import TimeStep


def team_spaces(
    observation_space: Space, action_space: Space, algorithm: str = "maddpg"
) -> tuple[TeamLayout, int]:
    """``(layout, A)`` of a grouped Box team's spaces (team observation ``[n + 1, W]``, team action
    Box ``[n, A]``), or a TypeError saying why they are not one."""
    try:
        layout = team_layout(observation_space)
    except ValueError as err:
        raise TypeError(f"{algorithm} acts for a team of agents: {err}") from None
    if (
        not isinstance(action_space, Box)
        or len(action_space.shape) != 2
        or action_space.shape[0] != layout.n_agents
        or not action_space.bounded
    ):
        raise TypeError(
            f"{algorithm} needs the team's bounded Box action [agents, A] (each agent's bounded one-dimensional "
            f"Box, padded to the widest by the rollout worker's agent grouping), got {action_space!r}"
        )
    return layout, int(action_space.shape[1])


def actor_input_dim(layout: TeamLayout, training: Any) -> int:
    """Width of the shared actor's input: an agent's observation, then (``agent_id``) its one-hot index."""
    return layout.obs_dim + (layout.n_agents if training.agent_id else 0)


def actor_inputs(agent_obs: np.ndarray, agent_id: bool) -> np.ndarray:
    """``[..., n, inputs]``: each agent's observation, then (``agent_id``) its one-hot index."""
    if not agent_id:
        return agent_obs
    n = agent_obs.shape[-2]
    ids = np.broadcast_to(np.eye(n, dtype=agent_obs.dtype), (*agent_obs.shape[:-2], n, n))
    return np.concatenate([agent_obs, ids], axis=-1)


def team_learner_refusals(
    config: RunConfig, algorithm: str, explores_with: str
) -> list[tuple[bool, str, str]]:
    """``(refused, key, message)`` for what a team learner (one shared actor, a centralised critic)
    does not build; ``explores_with`` says how it explores instead of an exploration plugin."""
    ids = multiagent.policy_ids(config)
    return [
        (
            len(ids) > 1,
            "multiagent.policies",
            f"{algorithm} learns one team policy (a shared actor, a centralised critic) for all "
            f"agents; the config names {len(ids)} ({', '.join(ids)})",
        ),
        (
            bool(config.model.lstm),
            "model.lstm",
            f"{algorithm}'s actor and critic are feed-forward; set it to false",
        ),
        (
            bool(config.model.custom),
            "model.custom",
            f"{algorithm} builds its own shared actor and centralised critic (model.hidden_sizes)",
        ),
        (
            config.exploration.name is not None,
            "exploration.name",
            f"{algorithm} explores with {explores_with}; remove the key",
        ),
        *team_refusals(config, algorithm),
    ]


class TeamTrainer:
    """Mixed in before a replay trainer (DDPG's, SAC's): what a team learner refuses, its spaces, and
    the network keys that :meth:`reset_config` cannot change. A subclass sets :attr:`explores_with`
    (how it explores, for the refusal of an exploration plugin) and :attr:`network_keys`."""

    name: str
    config: RunConfig
    config_class: type
    explores_with: str = ""
    #: Keys that shape the networks (the actor's input, the number of critics): reset_config() refuses them.
    network_keys: tuple[str, ...] = ("agent_id",)

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Refuse what the team learner does not build, naming the key."""
        super().check_config(config)  # type: ignore[misc]
        for refused, key, message in team_learner_refusals(config, cls.name, cls.explores_with):
            if refused:
                raise config.fail(key, message)

    def reset_config(self, new_config: RunConfig | Mapping[str, Any]) -> bool:
        """As the base trainer's; False also when a key of :attr:`network_keys` changes (the networks
        are built once)."""
        if isinstance(new_config, Mapping):
            new_config = config_mod.resolve(new_config, training_class=self.config_class)
        old, new = self.config.training, new_config.training
        if any(getattr(old, key) != getattr(new, key) for key in self.network_keys):
            return False
        return super().reset_config(new_config)  # type: ignore[misc]

    @classmethod
    def check_spaces(cls, config: RunConfig, observation_space: Any, action_space: Any) -> None:
        """The spaces of a grouped Box team (the rollout workers group every env, a single-agent one as
        a team of one; Discrete or unequal action spaces are refused there)."""
        try:
            team_spaces(observation_space, action_space, cls.name)
        except TypeError as err:
            raise UnsupportedError(f"algorithm '{cls.name}', env '{config.env.name}': {err}") from None


class TeamActing:
    """Mixed in before DDPG's or SAC's policy on a backend: ``compute_actions`` for the team, each
    agent acting on its own row through the numpy actor twin. DDPG's exploration noise (Gaussian or
    OU, on the flat joint action) is independent per agent and action component; SAC's twin samples
    each agent's squashed Gaussian (its ``exploration`` adds nothing).

    The host provides ``layout``, ``agent_actions`` (A), ``num_actions`` (n x A, the joint width),
    ``actor_twin``, ``acting_rng``, ``action_low`` / ``action_half_range`` (flat, n x A),
    ``exploration``, ``get_weights`` and ``weights_version``.
    """

    config: Any
    observation_space: Any
    layout: TeamLayout
    agent_actions: int
    num_actions: int
    actor_twin: Any
    acting_rng: np.random.Generator
    action_low: np.ndarray
    action_half_range: np.ndarray
    global_timestep: int
    weights_version: int
    exploration: Any  # DeterministicActorRules.exploration: DDPG's noise on the flat joint action
    get_weights: Any

    def team_observations(self, observations: Any) -> np.ndarray:
        """Team observations as ``[B, n + 1, W]`` float32 (a flat batch is reshaped)."""
        shape = self.observation_space.shape
        return np.asarray(observations, np.float32).reshape(-1, *shape)

    def agent_actor_inputs(self, observations: Any) -> np.ndarray:
        """``[B, n, inputs]``: the shared actor's input rows of a batch of team observations."""
        agent_obs, _, _ = self.layout.split(self.team_observations(observations))
        return actor_inputs(agent_obs, self.config.training.agent_id)

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        """Team actions ``[B, n, A]``: uniform before ``learning_starts`` env steps (as DDPG and SAC), else
        each agent's ``tanh(mu(o_a, id_a))`` (exploring: with DDPG's noise, or SAC's sample) rescaled to
        its bounds."""
        twin = self.actor_twin
        if twin.version != self.weights_version:
            twin.load(self.get_weights(), self.weights_version)
        inputs = self.agent_actor_inputs(timestep.observation)
        batch, n = inputs.shape[:2]
        if explore and self.global_timestep < self.config.training.learning_starts:
            squashed = self.acting_rng.uniform(-1.0, 1.0, (batch, self.num_actions))
        else:
            squashed = twin.act(inputs.reshape(batch * n, -1), explore).reshape(batch, self.num_actions)
            if explore:
                squashed = self.exploration(squashed, timestep)
        actions = self.action_low + (squashed + 1.0) * self.action_half_range
        return actions.astype(np.float32, copy=False).reshape(batch, n, self.agent_actions), state, {}
