"""Adam, SGD and RMSprop as small foreach-based classes.

Why not ``torch.optim``: its optimizers import ``torch._dynamo`` on first use
(``Optimizer.add_param_group`` and ``step`` go through dynamo's decorators),
which costs 1.6-2 s per process on the 2-core machine, more than half of the
3 s budget from ``rlgear train`` launch to the first result (measured with
``python -X importtime``). These classes implement the same update rules
(Kingma & Ba 2015 for Adam, with bias correction; RMSprop as in torch with
``alpha=0.99``) with ``torch._foreach_*`` kernels, and keep their state as
named tensors for safetensors checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch


class Optimizer:
    """The interface TorchPolicy uses: ``zero_grad``, ``step``, ``lr``, state as arrays + JSON."""

    #: per-parameter state buffers, in the order of ``self.params``
    buffer_names: tuple[str, ...] = ()

    def __init__(self, params: Iterable[torch.Tensor], lr: float):
        self.params = [p for p in params if p.requires_grad]
        self.lr = float(lr)
        self.steps = 0
        self.buffers = {name: [torch.zeros_like(p) for p in self.params] for name in self.buffer_names}

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def to(self, device: torch.device, replaced: Mapping[int, torch.Tensor] | None = None) -> None:
        """The state buffers to ``device``, where the parameters went (``TorchPolicy.to_device``);
        ``replaced`` maps ``id(old parameter)`` to the one that took its place, if any did."""
        if replaced:
            self.params = [replaced.get(id(p), p) for p in self.params]
        self.buffers = {name: [b.to(device) for b in bufs] for name, bufs in self.buffers.items()}

    def _grads(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        pairs = [(p, p.grad) for p in self.params if p.grad is not None]
        return [p for p, _ in pairs], [g for _, g in pairs]

    def _buffers_for(self, name: str) -> list[torch.Tensor]:
        return [b for p, b in zip(self.params, self.buffers[name], strict=True) if p.grad is not None]

    def step(self) -> None:
        raise TypeError(f"{type(self).__name__} must implement step()")

    @property
    def type_name(self) -> str:
        """What ``state_meta()["type"]`` holds: a restore refuses another optimizer's state."""
        return type(self).__name__

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr}

    def state_arrays(self) -> dict[str, torch.Tensor]:
        return {f"{name}/{i}": b for name, bufs in self.buffers.items() for i, b in enumerate(bufs)}

    def state_meta(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "steps": self.steps, **self.hyperparameters()}

    def load_state(self, arrays: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        if meta.get("type") != type(self).__name__:
            raise ValueError(f"optimizer state of a {meta.get('type')}, this is a {type(self).__name__}")
        with torch.no_grad():
            for name, bufs in self.buffers.items():
                for i, buf in enumerate(bufs):
                    buf.copy_(arrays[f"{name}/{i}"])
        self.steps = int(meta["steps"])


class Adam(Optimizer):
    buffer_names = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        super().__init__(params, lr)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)

    @torch.no_grad()
    def step(self) -> None:
        params, grads = self._grads()
        if not params:
            return
        self.steps += 1
        beta1, beta2 = self.betas
        exp_avg, exp_avg_sq = self._buffers_for("exp_avg"), self._buffers_for("exp_avg_sq")
        torch._foreach_lerp_(exp_avg, grads, 1.0 - beta1)
        torch._foreach_mul_(exp_avg_sq, beta2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1.0 - beta2)
        bias1 = 1.0 - beta1**self.steps
        bias2_sqrt = math.sqrt(1.0 - beta2**self.steps)
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(params, exp_avg, denom, value=-self.lr / bias1)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "betas": list(self.betas), "eps": self.eps}


class SGD(Optimizer):
    @torch.no_grad()
    def step(self) -> None:
        params, grads = self._grads()
        if params:
            self.steps += 1
            torch._foreach_add_(params, grads, alpha=-self.lr)


class RMSprop(Optimizer):
    buffer_names = ("square_avg",)

    def __init__(self, params, lr: float, alpha: float = 0.99, eps: float = 1e-8):
        super().__init__(params, lr)
        self.alpha, self.eps = float(alpha), float(eps)

    @torch.no_grad()
    def step(self) -> None:
        params, grads = self._grads()
        if not params:
            return
        self.steps += 1
        square_avg = self._buffers_for("square_avg")
        torch._foreach_mul_(square_avg, self.alpha)
        torch._foreach_addcmul_(square_avg, grads, grads, value=1.0 - self.alpha)
        denom = torch._foreach_sqrt(square_avg)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(params, grads, denom, value=-self.lr)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "alpha": self.alpha, "eps": self.eps}


BUILTINS: dict[str, type[Optimizer]] = {"adam": Adam, "sgd": SGD, "rmsprop": RMSprop}


def make_optimizer(
    name: str,
    params: Iterable[torch.Tensor],
    lr: float,
    eps: float,
    kwargs: dict[str, Any] | None = None,
    fail: Callable[[str, str], Exception] | None = None,
) -> Any:
    """The optimizer ``training.optimizer`` names: a built-in, or any ``torch.optim`` class by dotted path.

    ``eps`` (``training.optimizer_epsilon``) goes to adam, and to a dotted-path
    class that takes ``eps``, unless ``kwargs`` has one. ``fail(key, message)``
    builds the config error (``RunConfig.fail``) for a bad path or kwargs.
    """
    from rlgear.plugins.backends.torch.torch_optim import TorchOptim, check_kwargs, resolve_class

    fail = fail or _plain_fail
    kwargs = dict(kwargs or {})
    if name in BUILTINS:
        cls = BUILTINS[name]
        if name == "adam":
            kwargs.setdefault("eps", eps)
        check_kwargs(cls, kwargs, name, fail)
        try:
            return cls(params, lr, **kwargs)
        except (TypeError, ValueError) as err:
            raise fail("training.optimizer_kwargs", f"{name} refused them: {err}") from None
    cls = resolve_class(name, fail)
    return TorchOptim(cls, name, params, lr, eps, kwargs, fail)


def _plain_fail(path: str, message: str) -> Exception:
    from rlgear.errors import ConfigError

    return ConfigError(f"{path}: {message}")
