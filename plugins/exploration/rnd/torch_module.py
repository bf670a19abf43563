"""RND's loss and gradients with torch autograd (the rest is :mod:`.common`, shared with TF)."""

from __future__ import annotations

import numpy as np
import torch

from rlgear.plugins.exploration.rnd.common import RNDModuleBase
from rlgear.plugins.exploration.torch_nets import TorchForwardMixin, leaf_tensors, mlp


class RNDTorchModule(TorchForwardMixin, RNDModuleBase):
    """RND on the torch backend."""

    def loss_and_gradients(self, params, inputs):
        tensors = leaf_tensors(self, params)
        hidden = len(self.options.hidden_sizes)
        x = torch.from_numpy(inputs["x"])
        mask = torch.from_numpy(inputs["mask"])
        predicted = mlp(tensors, "predictor", hidden, x)
        with torch.no_grad():
            target = mlp(tensors, "target", hidden, x)
        per_row = (predicted - target).square().mean(dim=1)
        predictor_loss = (per_row * mask).sum() / mask.sum().clamp(min=1.0)
        loss = predictor_loss
        stats = {"predictor_loss": float(predictor_loss.detach())}
        if "value_targets" in inputs:
            values = mlp(
                tensors,
                "intrinsic_value",
                len(self.options.value_hidden_sizes),
                torch.from_numpy(inputs["obs"]),
            )
            value_loss = 0.5 * (values[:, 0] - torch.from_numpy(inputs["value_targets"])).square().mean()
            loss = loss + value_loss
            stats["intrinsic_value_loss"] = float(value_loss.detach())
        names = [n for n in self.trainable if n.startswith("predictor/") or "value_targets" in inputs]
        grads = torch.autograd.grad(loss, [tensors[n] for n in names])
        out = {n: g.numpy() for n, g in zip(names, grads, strict=True)}
        for name in self.trainable:  # the value head without value targets: no gradient
            out.setdefault(name, np.zeros_like(params[name]))
        return float(loss.detach()), stats, out
