"""What the numpy acting twins of the catalog's recurrent actor-critics share (``model.lstm``:
:mod:`rlgear.blocks.lstm_inference`; ``model.attention``: :mod:`rlgear.blocks.attention_inference`).

Both are [conv trunk ->] MLP trunk -> a memory -> policy and value heads, read from the same
neutral weight names (``shared/...``, ``policy/output``, ``value/output``, ``policy/log_std``);
only the memory between trunk and heads differs, and each twin writes its own ``forward``.
"""

from __future__ import annotations

import numpy as np

from rlgear.blocks.conv_inference import NumpyConvTrunk
from rlgear.blocks.inference import NumpyActorCritic
from rlgear.config.conv import ConvSpec
from rlgear.spaces import Space


class NumpyRecurrentActorCritic(NumpyActorCritic):
    """The trunk and heads of a recurrent twin; a subclass loads its memory's weights in ``load``
    (after :meth:`_load_trunk_and_heads`) and runs :meth:`_trunk`, its memory, then :meth:`_heads`
    in ``forward(obs, state, prev_actions, prev_rewards)``.

    Sampling (inverse-CDF Categorical, Gaussian) is the MLP twin's, on ``self.rng``.
    """

    def __init__(
        self, action_space: Space, model_config: object, seed: int | None = None, conv: ConvSpec | None = None
    ):
        super().__init__(action_space, 0, model_config.activation, True, seed)
        self.conv = None if conv is None else NumpyConvTrunk(conv)
        self.hidden_layers = len(model_config.hidden_sizes)

    def _load_trunk_and_heads(self, weights: dict[str, np.ndarray]) -> None:
        def f32(name: str) -> np.ndarray:
            return np.ascontiguousarray(weights[name], dtype=np.float32)

        self.trunk = [
            (f32(f"shared/hidden_{i}/kernel"), f32(f"shared/hidden_{i}/bias"))
            for i in range(self.hidden_layers)
        ]
        # the policy and value heads as one matmul
        self.head = (
            np.ascontiguousarray(
                np.concatenate([f32("policy/output/kernel"), f32("value/output/kernel")], 1)
            ),
            np.concatenate([f32("policy/output/bias"), f32("value/output/bias")]),
        )
        self.num_head_outputs = f32("policy/output/bias").shape[0]
        self.log_std = None if self.discrete else f32("policy/log_std")
        if self.conv is not None:
            self.conv.load(weights)

    def _trunk(self, obs: np.ndarray) -> np.ndarray:
        """The conv and MLP trunk on flat float32 observations ``[B, F]``."""
        n = obs.shape[0]
        x = obs
        if self.conv is not None:
            x = self.conv.forward(obs, np.empty((n, self.conv.spec.output_dim), np.float32))
        for kernel, bias in self.trunk:
            x = self.activation(x @ kernel + bias, np.empty((n, kernel.shape[1]), np.float32))
        return x

    def _heads(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(policy head output, values)`` of the memory's outputs."""
        out = x @ self.head[0] + self.head[1]
        return out[:, : self.num_head_outputs], out[:, self.num_head_outputs]

    def act(  # type: ignore[override]
        self,
        obs: np.ndarray,
        state: list[np.ndarray],
        explore: bool,
        prev_actions: np.ndarray | None = None,
        prev_rewards: np.ndarray | None = None,
        action_mask: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """``(actions, action_logp, values, new_state)``, as the framework would give
        (``action_mask`` as in :meth:`NumpyActorCritic.act`)."""
        head, values, new_state = self.forward(obs, state, prev_actions, prev_rewards)
        actions, logp, values = self.sample(head, values, explore, action_mask)
        return actions, logp, values, new_state
