"""TRPO on the torch backend: the Fisher-vector product by double backpropagation, the value loss.

The model is the catalog's actor-critic MLP with separate policy and value networks (the same
weights, under the same names, as ppo's), so a trpo checkpoint's policy loads where a ppo one does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlgear.plugins.algorithms.trpo.learning import TRPO_COLUMNS, TRPOLearning, split_weight_names
from rlgear.plugins.backends.torch import TorchPolicy, masked_mean
from rlgear.plugins.backends.torch.models import from_neutral_kernel
from rlgear.plugins.backends.torch.optimizers import make_optimizer
from rlgear.sample_batch import SampleBatch as SB
from rlgear.spaces import Space


def _flat(tensors: list[torch.Tensor | None], like: list[torch.Tensor]) -> torch.Tensor:
    """One float64 vector of ``tensors`` (a None gradient as zeros of its parameter's shape)."""
    return torch.cat(
        [
            (t if t is not None else torch.zeros_like(p)).reshape(-1).double()
            for t, p in zip(tensors, like, strict=True)
        ]
    )


class TorchPolicyStep:
    """One batch's policy step (:class:`~rlgear.plugins.algorithms.trpo.natural_gradient.PolicyStepProblem`)."""

    def __init__(self, policy: TRPOTorchPolicy, batch: SB):
        self.policy = policy
        self.tensors = policy.to_tensors(batch, policy.learner_columns(policy.loss_columns))
        named = policy.policy_parameters()
        self.torch_names = [name for name, _ in named]
        self.names = [policy._weight_names[name] for name in self.torch_names]
        self.params = [p for _, p in named]
        with torch.no_grad():
            self.old = policy.action_distribution(policy.model_outputs(self.tensors)[0], self.tensors)
        self._kl_gradient: torch.Tensor | None = None

    def _distribution(self) -> Any:
        return self.policy.action_distribution(self.policy.model_outputs(self.tensors)[0], self.tensors)

    def _surrogate(self, dist: Any) -> torch.Tensor:
        ratio = torch.exp(dist.logp(self.tensors[SB.ACTIONS]) - self.tensors[SB.ACTION_LOGP])
        return (ratio * self.tensors[SB.ADVANTAGES]).mean()

    def get_params(self) -> np.ndarray:
        return torch.cat([p.detach().reshape(-1).double() for p in self.params]).cpu().numpy()

    def set_params(self, flat: np.ndarray) -> None:
        with torch.no_grad():
            start = 0
            for p in self.params:
                size = p.numel()
                p.copy_(torch.from_numpy(np.asarray(flat[start : start + size])).view_as(p))
                start += size

    def unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """A flat vector as ``{neutral name: array}`` in the neutral layout (kernels ``[in, out]``)."""
        out, start = {}, 0
        for name, neutral, p in zip(self.torch_names, self.names, self.params, strict=True):
            size = p.numel()
            value = np.asarray(flat[start : start + size]).reshape(tuple(p.shape))
            out[neutral] = self.policy.to_neutral_layout(name, value)
            start += size
        return out

    def flatten(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """The inverse of :meth:`unflatten`."""
        parts = []
        for name, neutral in zip(self.torch_names, self.names, strict=True):
            value = np.asarray(arrays[neutral], np.float64)
            if self.policy._is_kernel(name) and value.ndim in (2, 4):
                value = from_neutral_kernel(value)
            parts.append(value.reshape(-1))
        return np.concatenate(parts)

    def surrogate_and_gradient(self) -> tuple[float, np.ndarray, float]:
        dist = self._distribution()
        surrogate = self._surrogate(dist)
        grads = torch.autograd.grad(surrogate, self.params, allow_unused=True)
        with torch.no_grad():
            entropy = dist.entropy().mean()
        return float(surrogate.detach()), _flat(list(grads), self.params).cpu().numpy(), float(entropy)

    def fisher_vector_product(self, v: np.ndarray) -> np.ndarray:
        if self._kl_gradient is None:  # the KL's gradient graph, built once and kept for every product
            kl = self.old.kl(self._distribution()).mean()
            grads = torch.autograd.grad(kl, self.params, create_graph=True, allow_unused=True)
            self._kl_gradient = torch.cat(
                [
                    (g if g is not None else torch.zeros_like(p)).reshape(-1)
                    for g, p in zip(grads, self.params, strict=True)
                ]
            )
        vector = torch.from_numpy(np.asarray(v, np.float32)).to(self._kl_gradient.device)
        product = torch.autograd.grad(
            (self._kl_gradient * vector).sum(), self.params, retain_graph=True, allow_unused=True
        )
        return _flat(list(product), self.params).cpu().numpy()

    def surrogate_and_kl(self) -> tuple[float, float]:
        self._kl_gradient = None  # built at the old weights: not valid once they moved
        with torch.no_grad():
            dist = self._distribution()
            return float(self._surrogate(dist)), float(self.old.kl(dist).mean())


class TRPOTorchPolicy(TRPOLearning, TorchPolicy):
    loss_columns = TRPO_COLUMNS

    def __init__(self, observation_space: Space, action_space: Space, config: Any):
        super().__init__(observation_space, action_space, config)
        _, value_names = split_weight_names(self._weight_names.values())
        value = set(value_names)
        training = config.training
        # The value function's optimizer holds the value net only: a value step cannot move the policy.
        self.optimizer = make_optimizer(
            training.optimizer,
            [p for name, p in self.model.named_parameters() if self._weight_names[name] in value],
            self._current_lr(),
            training.optimizer_epsilon,
            training.optimizer_kwargs,
            getattr(config, "fail", None),
        )

    def policy_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """``(torch name, parameter)`` of the policy step (``policy/...`` and an image trunk), in model order."""
        policy = set(split_weight_names(self._weight_names.values())[0])
        return [(n, p) for n, p in self.model.named_parameters() if self._weight_names[n] in policy]

    def policy_step_problem(self, batch: SB) -> TorchPolicyStep:
        return TorchPolicyStep(self, batch)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The value loss ``0.5 mean (V(s) - target)^2``, the one loss TRPO descends by gradient steps."""
        _, values = self.model_outputs(batch)
        vf_loss = 0.5 * masked_mean((values - batch[SB.VALUE_TARGETS]) ** 2, batch.get(SB.SEQ_MASK))
        return vf_loss, {"vf_loss": vf_loss.detach()}
