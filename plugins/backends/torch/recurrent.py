"""The catalog LSTM actor-critic on torch (``model.lstm``).

The network and its framework-neutral weight names are documented in
:mod:`rlgear.blocks.lstm_inference` (the numpy twin): for image observations (or
an image-plus-vector layout) the conv trunk ``shared/conv_<i>``, an MLP trunk
``shared/hidden_<i>``, one LSTM layer ``lstm/{kernel,recurrent_kernel,bias}``
(gates i, f, g, o), then ``policy/output`` and ``value/output``.

The layer holds its own parameters rather than an ``nn.LSTM``: ``nn.LSTM`` has two
biases, where the neutral layout has one, so the second is a zero buffer (not a
parameter: out of the optimizer and of the weight names) passed to torch's fused
``torch.lstm``. Sequences with state resets inside (IMPALA's fixed-length
sequences, reset at FIRST rows) run a written-out loop of the same cell.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from rlgear.blocks.lstm_inference import lstm_input_size
from rlgear.plugins.backends.torch.models import ConvEncoder, _dense_stack, _head, orthogonal_
from rlgear.spaces import Discrete, Space


class LSTMLayer(nn.Module):
    """One LSTM layer; parameters in torch's ``[out, in]`` layout (``get_weights`` transposes)."""

    def __init__(self, input_size: int, cell_size: int):
        super().__init__()
        self.cell_size = cell_size
        self.input_weight = nn.Parameter(torch.empty(4 * cell_size, input_size))
        self.recurrent_weight = nn.Parameter(torch.empty(4 * cell_size, cell_size))
        self.bias = nn.Parameter(torch.zeros(4 * cell_size))
        # torch's fused LSTM takes a second (recurrent) bias; one bias is the neutral layout, so it is 0
        self.register_buffer("_zero_bias", torch.zeros(4 * cell_size), persistent=False)
        orthogonal_(self.input_weight, 1.0)
        for gate in range(4):  # each gate's recurrent block orthogonal (Saxe et al. 2014)
            block = torch.empty(cell_size, cell_size)
            orthogonal_(block, 1.0)
            with torch.no_grad():
                self.recurrent_weight[gate * cell_size : (gate + 1) * cell_size] = block
        with torch.no_grad():  # forget-gate bias 1: remember by default (Jozefowicz et al. 2015)
            self.bias[cell_size : 2 * cell_size] = 1.0

    def forward(
        self,
        inputs: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor],
        resets: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``inputs`` ``[N, L, in]`` from ``state`` ``([N, cell], [N, cell])``; ``resets`` ``[N, L]``
        (True: zero the state before that step). Returns outputs ``[N, L, cell]`` and the last state."""
        h, c = state
        if resets is None:  # torch's fused kernel: several times faster than the loop below, same math
            outputs, h, c = torch.lstm(
                inputs, (h[None], c[None]),
                [self.input_weight, self.recurrent_weight, self.bias, self._zero_bias],
                True, 1, 0.0, self.training, False, True,
            )  # fmt: skip
            return outputs, (h[0], c[0])
        cell = self.cell_size
        projected = inputs @ self.input_weight.T + self.bias  # one matmul for every step
        outputs = []
        for t in range(inputs.shape[1]):
            if resets is not None:
                keep = (~resets[:, t]).to(h.dtype)[:, None]
                h, c = h * keep, c * keep
            z = projected[:, t] + h @ self.recurrent_weight.T
            gates = torch.sigmoid(z)
            c = gates[:, cell : 2 * cell] * c + gates[:, :cell] * torch.tanh(z[:, 2 * cell : 3 * cell])
            h = gates[:, 3 * cell :] * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=1), (h, c)


class LSTMActorCritic(nn.Module):
    """[conv trunk ->] MLP trunk (shared by policy and value) -> LSTM -> policy and value heads.

    ``forward(obs, state, prev_actions, prev_rewards, seq_len, resets)``: rows are
    ``N`` sequences of ``seq_len`` steps, sequence-major (``[N*L, F]``); ``state`` is
    ``[h, c]`` at each sequence's start. Returns ``(dist_inputs [N*L, k], values [N*L],
    [h, c] after the last step)``.
    """

    recurrent = True

    def __init__(
        self,
        obs_dim: int,
        num_outputs: int,
        action_space: Space,
        model_config: Any,
        encoder: ConvEncoder | None = None,
    ):
        super().__init__()
        self.encoder = encoder  # registered first: its parameters lead named_parameters(), as on TF
        if encoder is not None:
            obs_dim = encoder.output_dim
        sizes = list(model_config.hidden_sizes)
        ortho = model_config.orthogonal_init
        self.action_space = action_space
        self.continuous = not isinstance(action_space, Discrete)
        self.use_prev_action = bool(model_config.lstm_use_prev_action)
        self.use_prev_reward = bool(model_config.lstm_use_prev_reward)
        self.cell_size = int(model_config.lstm_cell_size)
        self.shared_body = _dense_stack(
            obs_dim, sizes, model_config.activation, math.sqrt(2) if ortho else None
        )
        trunk = sizes[-1] if sizes else obs_dim
        self.lstm = LSTMLayer(lstm_input_size(trunk, action_space, model_config), self.cell_size)
        head_outputs = num_outputs // 2 if self.continuous else num_outputs
        self.policy_output = _head(self.cell_size, head_outputs, 0.01 if ortho else None)
        self.value_output = _head(self.cell_size, 1, 1.0 if ortho else None)
        if self.continuous:
            self.log_std = nn.Parameter(torch.full((head_outputs,), float(model_config.init_log_std)))

    def forward(
        self,
        obs: torch.Tensor,
        state: list[torch.Tensor],
        prev_actions: torch.Tensor | None = None,
        prev_rewards: torch.Tensor | None = None,
        seq_len: int = 1,
        resets: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        parts = [self.shared_body(obs if self.encoder is None else self.encoder(obs))]
        if self.use_prev_action:
            if self.continuous:
                parts.append(prev_actions.reshape(obs.shape[0], -1).to(obs.dtype))
            else:
                one_hot = nn.functional.one_hot(prev_actions.reshape(-1).long(), self.action_space.n)
                parts.append(one_hot.to(obs.dtype))
        if self.use_prev_reward:
            parts.append(prev_rewards.reshape(-1, 1).to(obs.dtype))
        features = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
        n = features.shape[0] // seq_len
        outputs, (h, c) = self.lstm(
            features.reshape(n, seq_len, -1),
            (state[0], state[1]),
            None if resets is None else resets.reshape(n, seq_len),
        )
        outputs = outputs.reshape(n * seq_len, -1)
        logits = self.policy_output(outputs)
        values = self.value_output(outputs).squeeze(-1)
        if self.continuous:
            logits = torch.cat([logits, self.log_std.expand_as(logits)], dim=-1)
        return logits, values, [h, c]

    def weight_names(self) -> dict[str, str]:
        names = {} if self.encoder is None else self.encoder.weight_names("shared", "encoder")
        index = 0
        for i, module in enumerate(self.shared_body):
            if isinstance(module, nn.Linear):
                names[f"shared_body.{i}.weight"] = f"shared/hidden_{index}/kernel"
                names[f"shared_body.{i}.bias"] = f"shared/hidden_{index}/bias"
                index += 1
        names["lstm.input_weight"] = "lstm/kernel"
        names["lstm.recurrent_weight"] = "lstm/recurrent_kernel"
        names["lstm.bias"] = "lstm/bias"
        for head in ("policy", "value"):
            names[f"{head}_output.weight"] = f"{head}/output/kernel"
            names[f"{head}_output.bias"] = f"{head}/output/bias"
        if self.continuous:
            names["log_std"] = "policy/log_std"
        return names
