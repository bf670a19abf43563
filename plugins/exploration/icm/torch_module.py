"""ICM's loss and gradients with torch autograd (the rest is :mod:`.common`, shared with TF)."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from rlgear.plugins.exploration.icm.common import ICMModuleBase
from rlgear.plugins.exploration.nets import INTRINSIC_VALUE
from rlgear.plugins.exploration.torch_nets import TorchForwardMixin, leaf_tensors, mlp


class ICMTorchModule(TorchForwardMixin, ICMModuleBase):
    """ICM on the torch backend."""

    def loss_and_gradients(self, params, inputs):
        tensors = leaf_tensors(self, params)
        o = self.options

        def net(name, x):
            return mlp(tensors, name, len(self.specs[name].hidden), x)

        actions = torch.from_numpy(inputs["actions"])
        phi = net("feature", torch.from_numpy(inputs["x"]))
        phi_next = net("feature", torch.from_numpy(inputs["next_x"]))
        logits = net("inverse", torch.cat([phi, phi_next], dim=1))
        inverse_loss = F.cross_entropy(logits, actions)
        one_hot = F.one_hot(actions, self.num_actions).to(phi.dtype)
        predicted = net("forward", torch.cat([phi, one_hot], dim=1))
        forward_loss = 0.5 * (predicted - phi_next).square().sum(dim=1).mean()
        loss = (1.0 - o.beta) * inverse_loss + o.beta * forward_loss
        stats = {"inverse_loss": float(inverse_loss.detach()), "forward_loss": float(forward_loss.detach())}
        value_mode = "value_targets" in inputs
        if value_mode:
            values = net(INTRINSIC_VALUE, torch.from_numpy(inputs["obs"]))
            value_loss = 0.5 * (values[:, 0] - torch.from_numpy(inputs["value_targets"])).square().mean()
            loss = loss + value_loss
            stats["intrinsic_value_loss"] = float(value_loss.detach())
        names = [n for n in self.trainable if value_mode or not n.startswith(INTRINSIC_VALUE + "/")]
        grads = torch.autograd.grad(loss, [tensors[n] for n in names])
        out = {n: g.numpy() for n, g in zip(names, grads, strict=True)}
        for name in self.trainable:  # the value head without value targets: no gradient
            out.setdefault(name, np.zeros_like(params[name]))
        return float(loss.detach()), stats, out
