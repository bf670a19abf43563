"""DQN on the TensorFlow backend: the Q-network, epsilon-greedy acting, the target network and the TD loss.

The same network (weight names ``q/...``), loss and target-network rules as
``torch_policy``, so DQN checkpoints move between the backends too.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from rlgear.blocks.replay_buffers import NEXT_ACTION_MASK, NEXT_OBS, WEIGHTS
from rlgear.blocks.schedules import piecewise_linear
from rlgear.blocks.target_network import TargetNetworkState
from rlgear.export.signature import explore_refused
from rlgear.plugins.algorithms.dqn.rainbow import (
    NoiseRngState,
    atom_support,
    expected_q,
    resample_noise,
    zero_noise,
)
from rlgear.plugins.backends.tf import (
    ACTIVATIONS,
    ConvEncoder,
    Dense,
    TargetModel,
    TFPolicy,
    build_model,
    conv_encoder,
    tf,
)
from rlgear.plugins.backends.tf.export_heads import QValueHead
from rlgear.policy import epsilon_greedy_actions
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete, Space, flat_dim
from rlgear.timestep import TimeStep


class NoisyDense(tf.Module):
    """A factorised Gaussian noisy dense layer (Fortunato et al. 2018, sec. 3.2); see the torch
    ``NoisyLinear``: the same weights (``{kernel,bias}_{mu,sigma}``, kernels ``[in, out]``), the same
    initialisation rule, the noise set from outside into non-trainable variables."""

    def __init__(self, in_dim: int, out_dim: int, sigma0: float, rng: np.random.Generator):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        bound = 1.0 / math.sqrt(in_dim)
        self.kernel_mu = tf.Variable(rng.uniform(-bound, bound, (in_dim, out_dim)).astype(np.float32))
        self.kernel_sigma = tf.Variable(np.full((in_dim, out_dim), sigma0 * bound, np.float32))
        self.bias_mu = tf.Variable(rng.uniform(-bound, bound, out_dim).astype(np.float32))
        self.bias_sigma = tf.Variable(np.full(out_dim, sigma0 * bound, np.float32))
        self.noise_in = tf.Variable(np.zeros(in_dim, np.float32), trainable=False)
        self.noise_out = tf.Variable(np.zeros(out_dim, np.float32), trainable=False)

    def set_noise(self, noise_in: np.ndarray, noise_out: np.ndarray) -> None:
        self.noise_in.assign(noise_in)
        self.noise_out.assign(noise_out)

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        # x @ (mu + sigma * outer(e_in, e_out)) = x @ mu + ((x * e_in) @ sigma) * e_out
        noise = tf.matmul(x * self.noise_in, self.kernel_sigma) * self.noise_out
        return tf.matmul(x, self.kernel_mu) + noise + self.bias_mu + self.bias_sigma * self.noise_out

    def named(self, prefix: str) -> list[tuple[str, tf.Variable]]:
        return [
            (f"{prefix}/kernel_mu", self.kernel_mu),
            (f"{prefix}/kernel_sigma", self.kernel_sigma),
            (f"{prefix}/bias_mu", self.bias_mu),
            (f"{prefix}/bias_sigma", self.bias_sigma),
        ]


class QNetwork(tf.Module):
    """An MLP from observations to one Q-value per action (see the torch ``QNetwork``).

    With ``dueling``, ``Q = V + A - mean(A)`` (Wang et al. 2016, eq. 9). Returns
    ``(q_values, None)`` (the backend's model contract). With ``num_atoms`` > 1 (C51) the
    outputs are ``[B, actions * num_atoms]`` atom logits (action-major), dueling per atom;
    with ``noisy`` every dense layer is a :class:`NoisyDense`. Weight names:
    ``q/conv_<i>/{kernel,bias}`` (image observations), ``q/hidden_<i>/{kernel,bias}``, then
    ``q/output/...`` or ``q/value/...`` and ``q/advantage/...``; kernels ``[in, out]``;
    noisy layers have ``{kernel,bias}_{mu,sigma}``.
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        model_config: Any,
        dueling: bool,
        rng: np.random.Generator,
        encoder: ConvEncoder | None = None,
        num_atoms: int = 1,
        noisy: bool = False,
        sigma0: float = 0.5,
    ):
        super().__init__()
        ortho = model_config.orthogonal_init

        def dense(in_dim: int, out_dim: int, gain: float | None) -> tf.Module:
            return NoisyDense(in_dim, out_dim, sigma0, rng) if noisy else Dense(in_dim, out_dim, gain, rng)

        self.encoder = encoder
        self.hidden = []
        in_dim = obs_dim if encoder is None else encoder.output_dim
        for size in model_config.hidden_sizes:
            self.hidden.append(dense(in_dim, size, math.sqrt(2) if ortho else None))
            in_dim = size
        self.activation = ACTIVATIONS[model_config.activation]
        self.dueling = dueling
        self.num_actions, self.num_atoms = num_actions, num_atoms
        head_gain = 1.0 if ortho else None
        if dueling:
            self.value = dense(in_dim, num_atoms, head_gain)
            self.advantage = dense(in_dim, num_actions * num_atoms, head_gain)
        else:
            self.output = dense(in_dim, num_actions * num_atoms, head_gain)

    def __call__(self, obs: tf.Tensor) -> tuple[tf.Tensor, None]:
        features = obs if self.encoder is None else self.encoder(obs)
        for layer in self.hidden:
            features = self.activation(layer(features))
        if not self.dueling:
            return self.output(features), None
        advantages = tf.reshape(self.advantage(features), [-1, self.num_actions, self.num_atoms])
        values = tf.reshape(self.value(features), [-1, 1, self.num_atoms])
        q = values + advantages - tf.reduce_mean(advantages, axis=1, keepdims=True)  # per atom
        return tf.reshape(q, [-1, self.num_actions * self.num_atoms]), None

    def noisy_layers(self) -> list[NoisyDense]:
        """The noisy layers in the torch ``QNetwork``'s order (hidden layers, then the heads)."""
        heads = [self.value, self.advantage] if self.dueling else [self.output]
        return [layer for layer in [*self.hidden, *heads] if isinstance(layer, NoisyDense)]

    def named_variables(self) -> list[tuple[str, tf.Variable]]:
        out = [] if self.encoder is None else self.encoder.named("q")
        for i, layer in enumerate(self.hidden):
            out += layer.named(f"q/hidden_{i}")
        for head in ("value", "advantage") if self.dueling else ("output",):
            out += getattr(self, head).named(f"q/{head}")
        return out


def project_onto_support(
    rewards: tf.Tensor, discounts: tf.Tensor, next_probs: tf.Tensor, support: tf.Tensor
) -> tf.Tensor:
    """The C51 projection of ``r + discount * z`` onto ``support`` (see the torch ``project_onto_support``):
    ``sum_j clip(1 - |clip(r + discount z_j) - z_i| / dz, 0, 1) p_j``."""
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / tf.cast(tf.size(support) - 1, support.dtype)
    moved = tf.clip_by_value(rewards[:, None] + discounts[:, None] * support, v_min, v_max)  # [B, j]
    closeness = tf.maximum(1.0 - tf.abs(moved[:, None, :] - support[None, :, None]) / delta, 0.0)
    return tf.reduce_sum(closeness * next_probs[:, None, :], axis=-1)


def _huber(x: tf.Tensor, delta: float) -> tf.Tensor:
    """``torch.nn.functional.huber_loss`` per element: quadratic within ``delta``, linear beyond."""
    abs_x = tf.abs(x)
    return tf.where(abs_x < delta, 0.5 * x * x, delta * (abs_x - 0.5 * delta))


class _QValues(tf.Module):
    """The flat input -> ``[B, actions]`` Q-values (C51: each return distribution's mean), for export."""

    def __init__(self, model: Any, support: np.ndarray, num_atoms: int):
        super().__init__()
        self.model, self.num_atoms = model, num_atoms
        self.support = tf.constant(np.asarray(support, np.float32))

    def __call__(self, flat: tf.Tensor) -> tf.Tensor:
        outputs = self.model(flat)[0]
        if self.num_atoms == 1:
            return outputs
        logits = tf.reshape(outputs, [tf.shape(outputs)[0], -1, self.num_atoms])
        return tf.reduce_sum(tf.nn.softmax(logits, axis=-1) * self.support, axis=-1)


class DQNTFPolicy(NoiseRngState, TargetNetworkState, TargetModel, TFPolicy):
    """Epsilon-greedy acting on a Q-network, learning from replayed n-step transitions.

    Beyond the TFPolicy contract it keeps a target network (the backend's
    :class:`TargetModel`: updated by :meth:`update_target`, saved in :meth:`get_state`
    under ``target/``) and,
    after every :meth:`learn_on_batch`, the per-row TD errors in
    :attr:`td_errors` for prioritized replay.
    """

    loss_columns = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.DISCOUNTS, NEXT_OBS, NEXT_ACTION_MASK, WEIGHTS)
    observation_columns = (SB.OBS, NEXT_OBS)
    row_outputs = ("td_errors",)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        if not isinstance(action_space, Discrete):
            raise TypeError(f"DQN needs discrete actions, got {action_space!r}")
        training = config.training
        self.num_atoms = int(training.num_atoms)
        self.atoms = atom_support(self.num_atoms, training.v_min, training.v_max)  # numpy, for acting
        self.support = tf.constant(self.atoms)
        #: Draws the noisy layers' noise (the same stream on every backend).
        self.noise_rng = np.random.default_rng(None if config.seed is None else [config.seed, 0x4E])
        super().__init__(observation_space, action_space, config)  # builds make_model()'s Q-network
        # The target network starts as a copy of the online one (Mnih et al. 2015).
        self.make_target_model()
        self.acting_rng = np.random.default_rng(None if config.seed is None else config.seed + 1)
        #: |TD error| per row of the last learn_on_batch() batch, before that update.
        self.td_errors = np.zeros(0, dtype=np.float32)

    def make_model(self) -> Any:
        model_config = self.config.model
        training = self.config.training
        if model_config.custom:  # its dist_inputs are read as the Q-values (C51: the atoms' logits)
            outputs = self.num_outputs * training.num_atoms
            return build_model(
                self.observation_space, self.action_space, outputs, model_config, self.init_rng
            )
        return QNetwork(
            flat_dim(self.observation_space),
            self.num_outputs,
            model_config,
            training.dueling,
            self.init_rng,
            conv_encoder(self.observation_space, model_config, self.init_rng),
            num_atoms=training.num_atoms,
            noisy=training.noisy,
            sigma0=training.sigma0,
        )

    # --- Rainbow: distributions and noise ---------------------------------------------
    def atom_logits(self, outputs: tf.Tensor) -> tf.Tensor:
        """The model's flat outputs as C51 logits ``[B, actions, num_atoms]``."""
        return tf.reshape(outputs, [tf.shape(outputs)[0], -1, self.num_atoms])

    def q_values(self, outputs: tf.Tensor) -> tf.Tensor:
        """``[B, actions]``: the outputs themselves, or with C51 each distribution's mean ``sum_i p_i z_i``."""
        if self.num_atoms == 1:
            return outputs
        return tf.reduce_sum(tf.nn.softmax(self.atom_logits(outputs), axis=-1) * self.support, axis=-1)

    def export_head(self, explore: bool) -> QValueHead:
        """The acting part of an exported graph: greedy on the Q-values, noisy layers at their mean
        weights (on a copy: the live network keeps its noise)."""
        if explore:
            raise explore_refused(
                "dqn explores epsilon-greedily on a schedule of env steps (or with the noise of its noisy "
                "layers), which an exported graph does not carry"
            )
        model = copy.deepcopy(self.model)
        if self.config.training.noisy:
            zero_noise(model.noisy_layers())
        return QValueHead(_QValues(model, self.atoms, self.num_atoms), self.action_space.n)

    def set_noise(self, explore: bool) -> None:
        """Noisy nets: fresh noise for acting (``explore``), none (the mean weights) for greedy acting."""
        if not self.config.training.noisy:
            return
        if explore:
            resample_noise(self.model.noisy_layers(), self.noise_rng)
        else:
            zero_noise(self.model.noisy_layers())

    # --- acting -------------------------------------------------------------------
    def epsilon(self) -> float:
        """The probability of a random action at ``global_timestep`` (linear decay)."""
        training = self.config.training
        if training.noisy:  # noisy nets explore instead (Fortunato et al. 2018)
            return 0.0
        if self.global_timestep >= training.epsilon_timesteps:
            return float(training.epsilon_final)
        points = [[0, training.epsilon_initial], [training.epsilon_timesteps, training.epsilon_final]]
        return piecewise_linear(points, self.global_timestep)

    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        self.set_noise(explore)
        outputs, _ = self._forward(tf.convert_to_tensor(self.preprocess(timestep.observation)))
        q_values = self.acting_q_values(outputs.numpy())
        epsilon = self.epsilon() if explore else 0.0
        actions = epsilon_greedy_actions(q_values, epsilon, self.acting_rng, timestep.action_mask)
        return actions, state, {}

    def acting_q_values(self, outputs: np.ndarray) -> np.ndarray:
        """``[B, actions]`` from the network's outputs, in numpy: a few eager TF ops per acting step
        cost more than the math (C51: each distribution's mean)."""
        if self.num_atoms == 1:
            return outputs
        return expected_q(outputs.reshape(len(outputs), -1, self.num_atoms), self.atoms)

    # --- learning -----------------------------------------------------------------
    def learn_on_batch(self, batch: SB) -> dict[str, float]:
        """One gradient step on ``batch``; afterwards :attr:`td_errors` holds its ``|TD error|`` per row."""
        self.td_errors = np.zeros(len(batch), dtype=np.float32)
        if self.config.training.noisy:  # fresh noise per training step, independent for the target
            resample_noise(self.model.noisy_layers(), self.noise_rng)
            resample_noise(self.target_model.noisy_layers(), self.noise_rng)
        return super().learn_on_batch(batch)

    def compute_td_errors(self, batch: SB) -> np.ndarray:
        """``|TD error|`` of every row of ``batch`` under the current networks, without learning.

        Ape-X's rollout workers give their fragments these initial priorities before sending them
        to replay (Horgan et al. 2018); the same :meth:`loss`, run eagerly without a gradient tape.
        """
        _, stats = self.loss(self.to_tensors(batch, self.learner_columns(self.loss_columns)))
        return stats["td_errors"].numpy().astype(np.float32)

    def on_row_outputs(self, rows: np.ndarray, outputs: dict[str, np.ndarray]) -> None:
        self.td_errors[rows] = outputs["td_errors"]

    def loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        if self.num_atoms > 1:
            return self.distributional_loss(batch)
        training = self.config.training
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        n = tf.shape(obs)[0]
        if training.double_q:  # one online pass over obs and next_obs: it also picks the next action
            q_both, _ = self.model(tf.concat([obs, next_obs], axis=0))
            q_values, next_q_online = q_both[:n], tf.stop_gradient(q_both[n:])
        else:
            q_values, _ = self.model(obs)
        actions = tf.cast(batch[SB.ACTIONS], tf.int32)[:, None]
        q_taken = tf.gather(q_values, actions, axis=1, batch_dims=1)[:, 0]
        next_q_target, _ = self.target_model(next_obs)
        next_mask = batch.get(NEXT_ACTION_MASK)  # actions allowed at next_obs: the max is over those
        if next_mask is not None:
            minus_inf = tf.constant(-np.inf, next_q_target.dtype)
            next_q_target = tf.where(next_mask, next_q_target, minus_inf)
        if training.double_q:  # van Hasselt et al. 2016: the online network selects, the target evaluates
            if next_mask is not None:
                next_q_online = tf.where(next_mask, next_q_online, minus_inf)
            next_actions = tf.argmax(next_q_online, axis=1, output_type=tf.int32)[:, None]
            next_q = tf.gather(next_q_target, next_actions, axis=1, batch_dims=1)[:, 0]
        else:
            next_q = tf.reduce_max(next_q_target, axis=1)
        # rewards: the n-step discounted sum; discounts: gamma**k, 0 after a terminal.
        targets = tf.stop_gradient(
            tf.cast(batch[SB.REWARDS], q_taken.dtype) + tf.cast(batch[SB.DISCOUNTS], q_taken.dtype) * next_q
        )
        td_errors = q_taken - targets
        if training.td_error_loss_fn == "huber":  # quadratic near 0, linear beyond huber_delta
            per_row = _huber(td_errors, training.huber_delta)
        else:
            per_row = 0.5 * tf.square(td_errors)
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * tf.cast(batch[WEIGHTS], per_row.dtype)
        loss = tf.reduce_mean(per_row)
        abs_td = tf.abs(tf.stop_gradient(td_errors))
        return loss, {
            "mean_q": tf.reduce_mean(tf.stop_gradient(q_taken)),
            "mean_target_q": tf.reduce_mean(targets),
            "mean_td_error": tf.reduce_mean(abs_td),
            "td_errors": abs_td,
        }

    def distributional_loss(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """C51 on n-step rows (see the torch policy): cross-entropy of the taken action's distribution
        to the target distribution projected onto the support; per-row cross-entropy as priority."""
        training = self.config.training
        obs, next_obs = batch[SB.OBS], batch[NEXT_OBS]
        n = tf.shape(obs)[0]
        online, _ = self.model(tf.concat([obs, next_obs], axis=0))
        actions = tf.cast(batch[SB.ACTIONS], tf.int32)[:, None]
        logits = tf.gather(self.atom_logits(online[:n]), actions, axis=1, batch_dims=1)[:, 0]
        log_probs = tf.nn.log_softmax(logits, axis=-1)  # [B, atoms]
        next_probs = tf.nn.softmax(self.atom_logits(self.target_model(next_obs)[0]), axis=-1)
        # Double Q: the online network's expected Q picks the next action; else the target's.
        if training.double_q:
            chooser = self.q_values(tf.stop_gradient(online[n:]))
        else:
            chooser = tf.reduce_sum(next_probs * self.support, axis=-1)
        next_mask = batch.get(NEXT_ACTION_MASK)
        if next_mask is not None:
            chooser = tf.where(next_mask, chooser, tf.constant(-np.inf, chooser.dtype))
        next_actions = tf.argmax(chooser, axis=1, output_type=tf.int32)[:, None]
        chosen_probs = tf.gather(next_probs, next_actions, axis=1, batch_dims=1)[:, 0]
        target_probs = tf.stop_gradient(
            project_onto_support(
                tf.cast(batch[SB.REWARDS], tf.float32),
                tf.cast(batch[SB.DISCOUNTS], tf.float32),
                chosen_probs,
                self.support,
            )
        )
        cross_entropy = -tf.reduce_sum(target_probs * log_probs, axis=-1)
        per_row = cross_entropy
        if WEIGHTS in batch:  # importance-sampling correction of prioritized replay (Schaul et al. 2016)
            per_row = per_row * tf.cast(batch[WEIGHTS], per_row.dtype)
        cross_entropy = tf.stop_gradient(cross_entropy)
        q_taken = tf.reduce_sum(tf.exp(tf.stop_gradient(log_probs)) * self.support, axis=-1)
        return tf.reduce_mean(per_row), {
            "mean_q": tf.reduce_mean(q_taken),
            "mean_target_q": tf.reduce_mean(tf.reduce_sum(target_probs * self.support, axis=-1)),
            "mean_cross_entropy": tf.reduce_mean(cross_entropy),
            "td_errors": cross_entropy,  # Rainbow's priority
        }
