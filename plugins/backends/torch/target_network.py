"""A whole-model target network for a torch policy: a frozen copy of ``self.model``.

APPO takes its importance ratios against it; DQN (with Rainbow and Ape-X) bootstraps its
TD targets from it. A policy mixes :class:`TargetModel` in before its base class (after
:class:`rlgear.blocks.target_network.TargetNetworkState`, which saves the copy in
checkpoints under ``target/``) and calls :meth:`TargetModel.make_target_model` once its
model exists. The TF backend's
``TargetModel`` has the same methods, and both name and lay out the target weights as
``get_weights`` does, so a checkpoint's target network moves between backends.
"""

from __future__ import annotations

import copy

import numpy as np
import torch


class TargetModel:
    target_model: torch.nn.Module | None = None

    def make_target_model(self) -> None:
        """The target network starts as an exact copy of the online one."""
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)

    def on_device(self, device: torch.device) -> None:
        """The target network goes where the online one went (``TorchPolicy.to_device``)."""
        super().on_device(device)
        if self.target_model is not None:
            self.target_model.to(device)

    def update_target(self, tau: float = 1.0) -> None:
        """``target <- tau * online + (1 - tau) * target``; ``tau=1`` copies (exactly)."""
        with torch.no_grad():
            for target, online in zip(self.target_model.parameters(), self.model.parameters(), strict=True):
                if tau >= 1.0:
                    target.copy_(online)
                else:
                    target.lerp_(online, tau)

    def get_target_weights(self) -> dict[str, np.ndarray]:
        """The target network's weights, named and laid out like :meth:`get_weights`."""
        out = {}
        for name, param in self.target_model.named_parameters():
            value = self.to_neutral_layout(name, param.detach().cpu().numpy())
            out[self._weight_names[name]] = np.ascontiguousarray(value).copy()
        return out

    def check_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Raise, naming the weight, if ``weights`` do not fit the target network (changes nothing)."""
        self._torch_layout(weights)

    def set_target_weights(self, weights: dict[str, np.ndarray]) -> None:
        converted = self._torch_layout(weights)  # all checks first
        with torch.no_grad():
            for name, param in self.target_model.named_parameters():
                param.copy_(torch.from_numpy(np.ascontiguousarray(converted[name], dtype=np.float32)))
