"""Torch helpers of the numpy-parameter exploration modules (``rnd``, ``icm``): the MLP on tensors
and the acting-side forward pass in torch (its single intra-op thread stays fast on a busy machine)."""

from __future__ import annotations

import numpy as np
import torch

from rlgear.plugins.exploration.nets import NumpyNetsModule, layer_names


def mlp(params: dict[str, torch.Tensor], network: str, num_hidden: int, x: torch.Tensor) -> torch.Tensor:
    for name in layer_names(network, num_hidden)[:-1]:
        x = torch.relu(x @ params[f"{name}/kernel"] + params[f"{name}/bias"])
    return x @ params[f"{network}/output/kernel"] + params[f"{network}/output/bias"]


class TorchForwardMixin:
    """``forward`` in torch instead of numpy (same float32 math); mixed in before the module base."""

    params: dict[str, np.ndarray]

    def forward(self, network: str, num_hidden: int, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            params = {k: torch.from_numpy(v) for k, v in self.params.items() if k.startswith(network + "/")}
            return mlp(params, network, num_hidden, torch.from_numpy(np.ascontiguousarray(x))).numpy()


def leaf_tensors(module: NumpyNetsModule, params: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """``params`` as tensors, the trainable ones requiring gradients."""
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in params.items()}
    for name in module.trainable:
        tensors[name].requires_grad_(True)
    return tensors
