"""The framework-free runtime's policies: the catalog networks' numpy twins behind the acting contract
:class:`rlgear.run.agent.LoadedPolicy` calls (``compute_actions(timestep, state, explore)``,
``get_initial_state``, ``recurrent``, the spaces).

Why separate classes and not the backends' policies: those import their framework. Each class here
holds one twin (:mod:`rlgear.blocks`) and chooses actions as the backend's policy does, so a
checkpoint acts the same with or without torch/TF. Each also exposes what the network outputs
(distribution inputs, Q-values, the actor's output) for parity checks against the framework.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks import attention_memory
from rlgear.blocks.action_inference import choose_actions
from rlgear.blocks.attention_inference import NumpyAttentionActorCritic
from rlgear.blocks.inference import NumpyActorCritic
from rlgear.blocks.lstm_inference import NumpyLSTMActorCritic
from rlgear.blocks.q_inference import NumpyQNetwork
from rlgear.blocks.schedules import piecewise_linear
from rlgear.blocks.squashed_inference import NumpyTanhActor
from rlgear.errors import UnsupportedError
from rlgear.policy import categorical_sample, epsilon_greedy_actions, flatten_observations
from rlgear.spaces import Space
from rlgear.timestep import TimeStep

Step = tuple[np.ndarray, Any, dict[str, np.ndarray]]


class RuntimePolicy:
    """What every runtime policy shares: the policy's spaces and config, a seeded acting RNG
    (``seed + 1``, as the backends' acting generators), no recurrent state."""

    recurrent = False

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.rng = np.random.default_rng(None if config.seed is None else config.seed + 1)

    def get_initial_state(self, batch_size: int) -> list[np.ndarray]:
        return []

    def flat(self, observations: Any) -> np.ndarray:
        """The network's input ``[B, F]`` (one-hot for Discrete observations)."""
        return flatten_observations(self.observation_space, observations)


class ActorCriticRuntime(RuntimePolicy):
    """The catalog actor-critic MLP (conv trunk for images), every action space the catalog acts in."""

    def __init__(self, observation_space: Space, action_space: Space, config: Any, net: NumpyActorCritic):
        super().__init__(observation_space, action_space, config)
        self.net = net

    def action_distribution_inputs(self, observations: Any) -> np.ndarray:
        """Logits, means and log stds, or a composite action's parts side by side (the backends' layout)."""
        return self.net.dist_inputs(self.flat(observations))

    def compute_actions(self, timestep: TimeStep, state: Any = None, explore: bool = True) -> Step:
        inputs = self.action_distribution_inputs(timestep.observation)
        return choose_actions(self.action_space, inputs, explore, self.rng, timestep.action_mask), state, {}


class LSTMRuntime(RuntimePolicy):
    """The catalog LSTM actor-critic (``model.lstm``; state ``[h, c]``) or attention memory
    (``model.attention``; state ``[memory, mask]``), Discrete or Box actions, through their numpy twins."""

    recurrent = True

    def __init__(
        self,
        observation_space: Space,
        action_space: Space,
        config: Any,
        net: NumpyLSTMActorCritic | NumpyAttentionActorCritic,
    ):
        super().__init__(observation_space, action_space, config)
        self.net = net

    def get_initial_state(self, batch_size: int) -> list[np.ndarray]:
        if getattr(self.config.model, "attention", False):
            return attention_memory.initial_state(batch_size, self.config.model)
        cell = int(self.config.model.lstm_cell_size)
        return [np.zeros((batch_size, cell), np.float32), np.zeros((batch_size, cell), np.float32)]

    def recurrent_step(
        self, timestep: TimeStep, state: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """One step: ``(dist_inputs, values, new_state)``, as the backends' ``recurrent_step``."""
        head, values, new_state = self.net.forward(
            self.flat(timestep.observation), state, timestep.prev_action, timestep.reward
        )
        if self.net.log_std is not None:
            head = np.concatenate([head, np.broadcast_to(self.net.log_std, head.shape)], axis=-1)
        return head, values, new_state

    def compute_actions(self, timestep: TimeStep, state: Any = None, explore: bool = True) -> Step:
        if state is None:
            state = self.get_initial_state(np.shape(timestep.step_type)[0])
        inputs, _, new_state = self.recurrent_step(timestep, state)
        actions = choose_actions(self.action_space, inputs, explore, self.rng, timestep.action_mask)
        return actions, new_state, {}


class QRuntime(RuntimePolicy):
    """DQN's Q-network: greedy actions are the best allowed Q-value (noisy layers on their mean
    weights); exploring is epsilon-greedy at the checkpoint's ``global_timestep`` on the trained
    schedule, or fresh noise for noisy nets (their epsilon is 0), as the backends' DQN policy."""

    def __init__(
        self, observation_space: Space, action_space: Space, config: Any, net: NumpyQNetwork, timestep: int
    ):
        super().__init__(observation_space, action_space, config)
        self.net = net
        self.global_timestep = timestep
        self.noise_rng = np.random.default_rng(None if config.seed is None else [config.seed, 0x4E])

    def q_values(self, observations: Any, explore: bool = False) -> np.ndarray:
        """``[B, actions]`` (C51: the distributions' means)."""
        noise = self.net.sample_noise(self.noise_rng) if explore and self.net.noisy else None
        return self.net.q_values(self.flat(observations), noise)

    def epsilon(self) -> float:
        training = self.config.training
        if self.net.noisy:
            return 0.0
        if self.global_timestep >= training.epsilon_timesteps:
            return float(training.epsilon_final)
        points = [[0, training.epsilon_initial], [training.epsilon_timesteps, training.epsilon_final]]
        return piecewise_linear(points, self.global_timestep)

    def compute_actions(self, timestep: TimeStep, state: Any = None, explore: bool = True) -> Step:
        q_values = self.q_values(timestep.observation, explore)
        epsilon = self.epsilon() if explore else 0.0
        return epsilon_greedy_actions(q_values, epsilon, self.rng, timestep.action_mask), state, {}


class TanhActorRuntime(RuntimePolicy):
    """SAC's, TD3's and DDPG's actor: ``tanh`` of the mean (or deterministic output) rescaled from
    ``[-1, 1]`` to the Box bounds. Exploring samples SAC's Gaussian; TD3's and DDPG's exploration
    noise belongs to their algorithm (a schedule, Ornstein-Uhlenbeck state), so they act greedily only."""

    def __init__(self, observation_space: Space, action_space: Space, config: Any, net: NumpyTanhActor):
        super().__init__(observation_space, action_space, config)
        self.net = net
        self.net.rng = self.rng
        low = action_space.low.astype(np.float32)
        self.low, self.half_range = low, (action_space.high.astype(np.float32) - low) / 2

    def actor_outputs(self, observations: Any) -> np.ndarray:
        """The actor's output layer: pre-tanh actions, or SAC's means then log stds."""
        return self.net.forward(self.flat(observations))

    def compute_actions(self, timestep: TimeStep, state: Any = None, explore: bool = True) -> Step:
        if explore and not self.net.gaussian:
            raise UnsupportedError(
                f"explore=True: {self.config.algorithm}'s exploration noise lives in its algorithm "
                "plugin; rlgear.inference acts greedily with it (explore=False)"
            )
        squashed = self.net.act(self.flat(timestep.observation), explore)
        return (self.low + (squashed + 1.0) * self.half_range).astype(np.float32, copy=False), state, {}


class CategoricalActorRuntime(RuntimePolicy):
    """Discrete SAC's actor: the argmax of its logits (greedy), or a draw from their softmax (exploring),
    as its backends' policies act."""

    def __init__(self, observation_space: Space, action_space: Space, config: Any, net: NumpyTanhActor):
        super().__init__(observation_space, action_space, config)
        self.net = net

    def actor_outputs(self, observations: Any) -> np.ndarray:
        """The actor's logits."""
        return self.net.forward(self.flat(observations))

    def compute_actions(self, timestep: TimeStep, state: Any = None, explore: bool = True) -> Step:
        logits = self.actor_outputs(timestep.observation)
        if explore:
            return categorical_sample(logits, self.rng), state, {}
        return np.argmax(logits, axis=-1).astype(np.int64), state, {}
