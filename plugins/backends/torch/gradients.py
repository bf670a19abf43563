"""Asynchronous gradients (A3C): computed on a worker, applied by the learner.

:class:`TorchGradients` is one part of :class:`~rlgear.plugins.backends.torch.policy.TorchPolicy`.
Gradients travel as numpy under the weights' framework-neutral names and layout (dense kernels
``[in, out]``), so they cross processes and backends as weights do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlgear.plugins.backends.torch.learning import clip_gradients
from rlgear.policy import NonFiniteGuard, all_finite
from rlgear.sample_batch import SampleBatch


class TorchGradients:
    """``compute_gradients`` / ``apply_gradients``; mixed into ``TorchPolicy`` (which sets the attributes)."""

    config: Any
    model: torch.nn.Module
    optimizer: Any
    nonfinite: NonFiniteGuard
    num_grad_updates: int
    weights_version: int
    device: torch.device
    _weight_names: dict[str, str]

    def compute_gradients(self, batch: SampleBatch) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Gradients of ``loss()`` on the whole batch, without changing the weights.

        Returned as numpy under the framework-neutral names and layout of
        :meth:`get_weights` (kernels ``[in, out]``), so they cross processes
        and backends like weights do. Not clipped: :meth:`apply_gradients`
        clips with ``training.grad_clip``, where the learner applies them. A
        parameter the loss does not reach gets a zero gradient.
        """
        tensors = self.to_tensors(batch, self.learner_columns(self.loss_columns))
        loss, stats = self.loss(tensors)
        self.optimizer.zero_grad()
        loss.backward()
        grads: dict[str, np.ndarray] = {}
        norms = []
        for name, param in self.model.named_parameters():
            # A parameter the loss does not reach (pg's value head without a baseline)
            # gets a zero gradient: apply_gradients expects every weight, as on TF.
            value = torch.zeros_like(param) if param.grad is None else param.grad.detach()
            norms.append(value.norm())
            value = self.to_neutral_layout(name, value.cpu().numpy())
            grads[self._weight_names[name]] = np.ascontiguousarray(value).copy()
        self.optimizer.zero_grad()
        out = {key: float(value) for key, value in stats.items()}
        out["total_loss"] = float(loss.detach())
        out["grad_gnorm"] = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0
        return grads, out

    def apply_gradients(self, grads: dict[str, np.ndarray]) -> None:
        """One optimizer step with ``grads`` from :meth:`compute_gradients` (clipped per ``grad_clip``).

        Every parameter's gradient must be present with the weight's shape;
        the check runs before anything changes.
        """
        converted = self._torch_layout(grads)  # names and shapes checked first
        finite = all_finite(grads)
        self.nonfinite.record(
            finite, self.config.training.max_nonfinite_updates, " (gradients from a worker)"
        )
        if not finite:
            return
        self.optimizer.lr = self._current_lr()
        self.optimizer.zero_grad()
        for name, param in self.model.named_parameters():
            param.grad = torch.from_numpy(
                np.array(converted[name], dtype=np.float32, order="C")  # a copy: may be read-only
            ).to(param.device)
        grad_clip = self.config.training.grad_clip
        if grad_clip is not None:
            clip_gradients(self.optimizer.params, grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.num_grad_updates += 1
        self.weights_version += 1
