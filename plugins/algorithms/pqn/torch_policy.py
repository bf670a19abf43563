"""PQN on the torch backend: the LayerNorm Q-network, epsilon-greedy acting and the Q(lambda) loss."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from rlgear.blocks.q_inference import LAYER_NORM_EPSILON
from rlgear.export.signature import explore_refused
from rlgear.plugins.algorithms.pqn.acting import EpsilonGreedyState, act_on_q_values
from rlgear.plugins.backends.torch import ConvEncoder, TorchPolicy, build_model, conv_encoder
from rlgear.plugins.backends.torch.export_heads import QValueHead
from rlgear.plugins.backends.torch.models import ACTIVATIONS, orthogonal_
from rlgear.plugins.families.onpolicy import MinibatchSGD
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Discrete, Space, flat_dim
from rlgear.timestep import TimeStep


def _linear(in_dim: int, out_dim: int, gain: float | None) -> nn.Linear:
    linear = nn.Linear(in_dim, out_dim)
    if gain is not None:
        orthogonal_(linear.weight, gain)
        nn.init.zeros_(linear.bias)
    return linear


class PQNQNetwork(nn.Module):
    """An MLP (after the conv trunk for images) from observations to one Q-value per action.

    Each hidden layer is dense -> LayerNorm -> activation when ``layer_norm`` (Gallici et al.
    2024, sec. 4; CleanRL's ``pqn.py`` QNetwork), dense -> activation otherwise.
    ``forward`` follows the backend's model contract, ``(q_values, None)``.

    Framework-neutral weight names: ``q/conv_<i>/{kernel,bias}`` (images), ``q/hidden_<i>/{kernel,bias}``,
    ``q/norm_<i>/{scale,offset}``, ``q/output/{kernel,bias}``; kernels ``[in, out]``.
    """

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        model_config: Any,
        layer_norm: bool,
        encoder: ConvEncoder | None = None,
    ):
        super().__init__()
        ortho = model_config.orthogonal_init
        self.encoder = encoder
        layers: list[nn.Module] = []
        in_dim = obs_dim if encoder is None else encoder.output_dim
        for size in model_config.hidden_sizes:
            layers.append(_linear(in_dim, size, math.sqrt(2) if ortho else None))
            if layer_norm:
                layers.append(nn.LayerNorm(size, eps=LAYER_NORM_EPSILON))
            layers.append(ACTIVATIONS[model_config.activation]())
            in_dim = size
        self.hidden = nn.Sequential(*layers)
        self.output = _linear(in_dim, num_actions, 1.0 if ortho else None)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, None]:
        if self.encoder is not None:
            obs = self.encoder(obs)
        return self.output(self.hidden(obs)), None

    def weight_names(self) -> dict[str, str]:
        names = {} if self.encoder is None else self.encoder.weight_names("q", "encoder")
        dense = norm = 0
        for position, module in enumerate(self.hidden):
            if isinstance(module, nn.Linear):
                names[f"hidden.{position}.weight"] = f"q/hidden_{dense}/kernel"
                names[f"hidden.{position}.bias"] = f"q/hidden_{dense}/bias"
                dense += 1
            elif isinstance(module, nn.LayerNorm):
                names[f"hidden.{position}.weight"] = f"q/norm_{norm}/scale"
                names[f"hidden.{position}.bias"] = f"q/norm_{norm}/offset"
                norm += 1
        names["output.weight"] = "q/output/kernel"
        names["output.bias"] = "q/output/bias"
        return names


class _QValues(nn.Module):
    """The flat input -> ``[B, actions]`` Q-values, for export."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        return self.model(flat)[0]


class PQNTorchPolicy(EpsilonGreedyState, MinibatchSGD, TorchPolicy):
    """Epsilon-greedy acting on the online Q-network; epochs of minibatch SGD on Q(lambda) targets.

    Acting records ``max_a Q(s, a)`` over the allowed actions as ``vf_preds`` (the bootstrap values of
    the targets, :func:`rlgear.plugins.algorithms.pqn.pqn.add_q_lambda_returns`).
    """

    loss_columns = (SB.OBS, SB.ACTIONS, SB.VALUE_TARGETS)

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        if not isinstance(action_space, Discrete):
            raise TypeError(f"PQN needs discrete actions, got {action_space!r}")
        super().__init__(observation_space, action_space, config)
        self.acting_rng = np.random.default_rng(None if config.seed is None else config.seed + 1)

    def make_model(self) -> nn.Module:
        model_config = self.config.model
        if model_config.custom:  # its dist_inputs are read as the Q-values
            return build_model(self.observation_space, self.action_space, self.num_outputs, model_config)
        return PQNQNetwork(
            flat_dim(self.observation_space),
            self.num_outputs,
            model_config,
            self.config.training.layer_norm,
            conv_encoder(self.observation_space, model_config),
        )

    # --- acting -------------------------------------------------------------------
    def compute_actions(
        self, timestep: TimeStep, state: Any = None, explore: bool = True
    ) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        with torch.inference_mode():
            obs = self.to_device_tensor(self.preprocess(timestep.observation), pin=False)
            q_values = self.model(obs)[0].cpu().numpy()
        epsilon = self.epsilon() if explore else 0.0
        actions, extras = act_on_q_values(q_values, epsilon, self.acting_rng, timestep.action_mask)
        return actions, state, extras

    def export_head(self, explore: bool) -> QValueHead:
        """The acting part of an exported graph: greedy on the Q-values."""
        if explore:
            raise explore_refused(
                "pqn explores epsilon-greedily on a schedule of env steps, which an exported graph does not carry"
            )
        return QValueHead(_QValues(copy.deepcopy(self.model)), self.action_space.n)

    # --- learning -----------------------------------------------------------------
    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        q_values, _ = self.model(batch[SB.OBS])
        q_taken = q_values.gather(1, batch[SB.ACTIONS].long().unsqueeze(1)).squeeze(1)
        targets = batch[SB.VALUE_TARGETS].to(q_taken.dtype)
        td_errors = q_taken - targets
        loss = 0.5 * (td_errors**2).mean()
        return loss, {
            "mean_q": q_taken.detach().mean(),
            "mean_target_q": targets.mean(),
            "mean_td_error": td_errors.detach().abs().mean(),
        }
