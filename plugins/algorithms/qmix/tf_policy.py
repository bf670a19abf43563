"""QMIX and VDN on the TensorFlow backend: the torch policy's networks (same weight names and
layout, see ``torch_policy``), acting and loss, so checkpoints move between the backends."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.target_network import TargetNetworkState
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.qmix import episodes
from rlgear.plugins.algorithms.qmix.acting import TeamActing, input_dim, team_spaces
from rlgear.plugins.algorithms.qmix.learning_batch import LearningBatch
from rlgear.plugins.backends.tf import Dense, TargetModel, TFPolicy, tf
from rlgear.spaces import Space


class AgentNetwork(tf.Module):
    """PyMARL's RNNAgent, as the torch ``AgentNetwork``: ``fc -> ReLU -> GRUCell -> fc``."""

    def __init__(self, in_dim: int, hidden: int, num_actions: int, rng: np.random.Generator):
        super().__init__()
        self.fc = Dense(in_dim, hidden, None, rng)
        self.gru_input = Dense(hidden, 3 * hidden, None, rng)
        self.gru_hidden = Dense(hidden, 3 * hidden, None, rng)
        self.output = Dense(hidden, num_actions, None, rng)
        self.hidden_size = hidden

    def unroll(self, inputs: tf.Tensor) -> tf.Tensor:
        """Q-values ``[B, L, n, actions]`` of inputs ``[B, L, n, in]`` (L static), the GRU from zeros."""
        gi = self.gru_input(tf.nn.relu(self.fc(inputs)))
        shape = tf.shape(inputs)
        hidden = tf.zeros(tf.stack([shape[0], shape[2], self.hidden_size]), inputs.dtype)
        outputs = []
        for t in range(inputs.shape[1]):
            i_r, i_z, i_n = tf.split(gi[:, t], 3, axis=-1)
            h_r, h_z, h_n = tf.split(self.gru_hidden(hidden), 3, axis=-1)
            r, z = tf.sigmoid(i_r + h_r), tf.sigmoid(i_z + h_z)
            hidden = (1.0 - z) * tf.tanh(i_n + r * h_n) + z * hidden
            outputs.append(hidden)
        return self.output(tf.stack(outputs, axis=1))

    def named(self) -> list[tuple[str, tf.Variable]]:
        """In the order of the torch network's ``named_parameters()``."""
        return [
            *self.fc.named("agent/fc"),
            ("agent/gru/kernel", self.gru_input.kernel),
            ("agent/gru/bias", self.gru_input.bias),
            ("agent/gru/recurrent_kernel", self.gru_hidden.kernel),
            ("agent/gru/recurrent_bias", self.gru_hidden.bias),
            *self.output.named("agent/output"),
        ]


class Hypernet(tf.Module):
    """One dense layer (``output``), or ``hidden -> ReLU -> output``."""

    def __init__(self, in_dim: int, out_dim: int, layers: int, embed: int, rng: np.random.Generator):
        super().__init__()
        self.hidden = Dense(in_dim, embed, None, rng) if layers == 2 else None
        self.output = Dense(embed if layers == 2 else in_dim, out_dim, None, rng)

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        if self.hidden is not None:
            x = tf.nn.relu(self.hidden(x))
        return self.output(x)

    def named(self, prefix: str) -> list[tuple[str, tf.Variable]]:
        hidden = [] if self.hidden is None else self.hidden.named(f"{prefix}/hidden")
        return hidden + self.output.named(f"{prefix}/output")


class QMixer(tf.Module):
    """The torch ``QMixer``: ``Q_tot = elu(q @ |W1(s)| + b1(s)) @ |W2(s)| + V(s)``."""

    def __init__(self, n_agents: int, state_dim: int, training: Any, rng: np.random.Generator):
        super().__init__()
        self.n_agents, self.embed = n_agents, training.mixing_embed_dim
        layers, hyper = training.hypernet_layers, training.hypernet_embed
        self.hyper_w1 = Hypernet(state_dim, self.embed * n_agents, layers, hyper, rng)
        self.hyper_b1 = Dense(state_dim, self.embed, None, rng)
        self.hyper_w2 = Hypernet(state_dim, self.embed, layers, hyper, rng)
        self.value = Hypernet(state_dim, 1, 2, self.embed, rng)

    def __call__(self, q: tf.Tensor, state: tf.Tensor) -> tf.Tensor:
        w1 = tf.abs(self.hyper_w1(state))
        w1 = tf.reshape(w1, tf.concat([tf.shape(w1)[:-1], [self.n_agents, self.embed]], axis=0))
        hidden = tf.nn.elu(tf.reduce_sum(q[..., :, None] * w1, axis=-2) + self.hyper_b1(state))
        w2 = tf.abs(self.hyper_w2(state))
        return tf.reduce_sum(hidden * w2, axis=-1) + self.value(state)[..., 0]

    def named(self) -> list[tuple[str, tf.Variable]]:
        return (
            self.hyper_w1.named("mixer/hyper_w1")
            + self.hyper_b1.named("mixer/hyper_b1")
            + self.hyper_w2.named("mixer/hyper_w2")
            + self.value.named("mixer/value")
        )


class TeamModel(tf.Module):
    """The agent network and the mixer (None for VDN's sum)."""

    def __init__(self, agent: AgentNetwork, mixer: QMixer | None):
        super().__init__()
        self.agent, self.mixer = agent, mixer

    def __call__(self, obs: tf.Tensor) -> Any:
        """The base policy compiles a (lazily traced) feed-forward acting function of the model;
        qmix acts through the numpy agent network instead, so it is never called."""
        raise TypeError("qmix/vdn act through their numpy agent network (acting.TeamActing)")

    def mix(self, q: tf.Tensor, state: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(q, axis=-1) if self.mixer is None else self.mixer(q, state)

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        return self.agent.named() + ([] if self.mixer is None else self.mixer.named())


class QMixTFPolicy(LearningBatch, TargetNetworkState, TeamActing, TargetModel, TFPolicy):
    """The torch ``QMixTorchPolicy`` on TF: numpy acting, one compiled step per minibatch of episodes."""

    groups_agents = True
    loss_columns = episodes.COLUMNS
    rows_are_sequences = True

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        self.layout, self.num_actions = team_spaces(observation_space, action_space)
        super().__init__(observation_space, action_space, config)  # its acting_rng draws epsilon-greedy
        self.recurrent = True
        self.make_target_model()

    def make_model(self) -> Any:
        training = self.config.training
        agent = AgentNetwork(
            input_dim(self.layout, self.num_actions, training),
            training.rnn_hidden_dim,
            self.num_actions,
            self.init_rng,
        )
        mixer = (
            QMixer(self.layout.n_agents, self.layout.state_dim, training, self.init_rng)
            if training.mixer == "qmix"
            else None
        )
        return TeamModel(agent, mixer)

    def learner_columns(self, loss_columns: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(loss_columns)

    def export_head(self, explore: bool) -> Any:
        raise UnsupportedError(
            "rlgear export: qmix/vdn act for a team with a recurrent agent network per agent, which the "
            "exported graphs do not carry; use rlgear.load on the checkpoint"
        )

    # --- learning -----------------------------------------------------------------
    def agent_q_values(self, model: TeamModel, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        training = self.config.training
        obs = batch[episodes.OBS]
        n = self.layout.n_agents
        parts = [tf.gather(obs[:, :, :n, 1:], self.layout.obs_columns, axis=-1)]
        if training.obs_last_action:
            one_hot = tf.one_hot(tf.cast(batch[episodes.ACTIONS], tf.int32), self.num_actions)
            parts.append(tf.concat([tf.zeros_like(one_hot[:, :1]), one_hot[:, :-1]], axis=1))
        if training.obs_agent_id:
            shape = tf.shape(obs)
            parts.append(tf.broadcast_to(tf.eye(n), tf.stack([shape[0], shape[1], n, n])))
        return model.agent.unroll(tf.concat(parts, axis=-1))

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The torch policy's loss (see ``QMixTorchPolicy.loss``)."""
        training = self.config.training
        obs = batch[episodes.OBS]
        n = self.layout.n_agents
        present = obs[:, :, :n, 0]
        state = tf.gather(obs[:, :, n, 1:], self.layout.state_columns, axis=-1)
        actions = tf.cast(batch[episodes.ACTIONS], tf.int32)
        allowed_next = tf.cast(batch[episodes.ACTION_MASK], tf.bool)[:, 1:]
        q = self.agent_q_values(self.model, batch)
        target_q = tf.stop_gradient(self.agent_q_values(self.target_model, batch))
        if training.double_q:
            online_next = tf.where(allowed_next, tf.stop_gradient(q[:, 1:]), -np.inf)
            best = tf.argmax(online_next, axis=-1, output_type=tf.int32)
            q_next = tf.gather(target_q[:, 1:], best[..., None], axis=-1, batch_dims=3)[..., 0]
        else:
            q_next = tf.reduce_max(tf.where(allowed_next, target_q[:, 1:], -np.inf), axis=-1)
        q_next = q_next * present[:, 1:]
        q_tot_next = self.target_model.mix(q_next, state[:, 1:])
        targets = tf.stop_gradient(
            batch[episodes.REWARDS][:, :-1] + training.gamma * batch[episodes.DISCOUNTS][:, :-1] * q_tot_next
        )
        q_taken = tf.gather(q[:, :-1], actions[:, :-1, :, None], axis=-1, batch_dims=3)[..., 0]
        q_tot = self.model.mix(q_taken * present[:, :-1], state[:, :-1])
        filled = batch[episodes.FILLED][:, :-1]
        td_errors = (q_tot - targets) * filled
        count = tf.maximum(tf.reduce_sum(filled), 1.0)
        loss = tf.reduce_sum(tf.square(td_errors)) / count
        return loss, {
            "mean_q_tot": tf.stop_gradient(tf.reduce_sum(q_tot * filled) / count),
            "mean_target": tf.reduce_sum(targets * filled) / count,
            "mean_td_error": tf.stop_gradient(tf.reduce_sum(tf.abs(td_errors)) / count),
        }
