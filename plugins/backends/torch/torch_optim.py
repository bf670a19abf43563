"""Any ``torch.optim`` optimizer (``training.optimizer: torch.optim.AdamW``) behind TorchPolicy's interface.

Why a wrapper: TorchPolicy drives its optimizer through ``zero_grad``,
``step``, an assignable ``lr`` (how ``lr_schedule`` reaches it) and state as
named arrays plus JSON (safetensors checkpoints, never pickle). A
``torch.optim`` optimizer keeps its state in ``state_dict()``: per-parameter
tensors, which become ``state/<param index>/<name>`` arrays, and param groups
of plain numbers, which go into the JSON metadata. Only a run that names such a
class pays for ``torch.optim``'s first use (it imports ``torch._dynamo``: 1.6-2 s).
"""

from __future__ import annotations

import importlib
import inspect
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from rlgear.errors import did_you_mean, unaccepted_keyword

Fail = Callable[[str, str], Exception]


def resolve_class(path: str, fail: Fail) -> type:
    """The optimizer class at ``path`` (``torch.optim.AdamW`` or ``package.module:Class``)."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise fail("training.optimizer", f"expected a dotted path such as torch.optim.AdamW, got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise fail("training.optimizer", f"cannot import module '{module_name}' of {path!r}: {err}") from None
    cls = getattr(module, attr, None)
    if cls is None:
        known = [
            n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, torch.optim.Optimizer)
        ]
        raise fail(
            "training.optimizer",
            f"module '{module_name}' has no attribute '{attr}'{did_you_mean(attr, known)}",
        )
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise fail("training.optimizer", f"{path!r} is not a torch.optim.Optimizer subclass (got {cls!r})")
    return cls


def check_kwargs(cls: type, kwargs: dict[str, Any], name: str, fail: Fail) -> None:
    """Refuse a keyword the constructor does not take, and the learning rate (``training.lr`` sets it)."""
    if "lr" in kwargs or "learning_rate" in kwargs:
        raise fail(
            "training.optimizer_kwargs",
            "the learning rate comes from training.lr / training.lr_schedule, not from here",
        )
    refused = unaccepted_keyword(cls.__init__, kwargs, skip=("params", "lr"))
    if refused:
        key, accepted = refused
        raise fail(
            f"training.optimizer_kwargs.{key}",
            f"{name} takes no argument '{key}'{did_you_mean(key, accepted)} "
            f"(it takes: {', '.join(accepted) or 'none'})",
        )


def _to_json(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def _like(template: Any, value: Any) -> Any:
    """``value`` read back from JSON, as a tuple where the optimizer had one (``betas``)."""
    if isinstance(template, tuple) and isinstance(value, list):
        return tuple(_like(t, v) for t, v in zip(template, value, strict=False))
    return value


class TorchOptim:
    """A ``torch.optim.Optimizer`` with the interface of the built-ins (``rlgear...torch.optimizers``)."""

    def __init__(
        self,
        cls: type,
        path: str,
        params: Iterable[torch.Tensor],
        lr: float,
        eps: float,
        kwargs: dict[str, Any],
        fail: Fail,
    ):
        self.params = [p for p in params if p.requires_grad]
        self.path = path
        kwargs = dict(kwargs)
        check_kwargs(cls, kwargs, path, fail)
        if "eps" in inspect.signature(cls.__init__).parameters:
            kwargs.setdefault("eps", eps)
        try:
            self.inner = cls(self.params, lr=float(lr), **kwargs)
        except (TypeError, ValueError) as err:
            raise fail("training.optimizer_kwargs", f"{path} refused them: {err}") from None
        self.steps = 0

    @property
    def type_name(self) -> str:
        return self.path

    @property
    def lr(self) -> float:
        return float(self.inner.param_groups[0]["lr"])

    @lr.setter
    def lr(self, value: float) -> None:
        for group in self.inner.param_groups:
            group["lr"] = float(value)

    def zero_grad(self) -> None:
        self.inner.zero_grad(set_to_none=True)

    def to(self, device: torch.device, replaced: Mapping[int, torch.Tensor] | None = None) -> None:
        """The state tensors to ``device``, where the parameters went (``TorchPolicy.to_device``);
        ``replaced`` maps ``id(old parameter)`` to the one that took its place, if any did.

        Loading its own state dict back moves the state: ``torch.optim`` casts each state tensor to
        its parameter's device on load (keeping ``step`` where its policy wants it), the same path a
        checkpoint's state takes in :meth:`load_state`. State made later is made on the device.
        """
        if replaced:
            self.params = [replaced.get(id(p), p) for p in self.params]
            for group in self.inner.param_groups:
                group["params"] = [replaced.get(id(p), p) for p in group["params"]]
            old_state = self.inner.state
            self.inner.state = defaultdict(dict)
            for param, state in old_state.items():
                self.inner.state[replaced.get(id(param), param)] = state
        if self.inner.state:
            self.inner.load_state_dict(self.inner.state_dict())

    def step(self) -> None:
        if any(p.grad is not None for p in self.params):
            self.inner.step()
            self.steps += 1

    def state_arrays(self) -> dict[str, torch.Tensor]:
        """Every tensor of ``state_dict()["state"]`` as ``state/<param index>/<name>``."""
        return {
            f"state/{index}/{key}": value
            for index, state in self.inner.state_dict()["state"].items()
            for key, value in state.items()
            if isinstance(value, torch.Tensor)
        }

    def state_meta(self) -> dict[str, Any]:
        """The param groups and the non-tensor per-parameter state, as JSON."""
        state_dict = self.inner.state_dict()
        scalars = {
            str(index): {
                key: _to_json(value) for key, value in state.items() if not isinstance(value, torch.Tensor)
            }
            for index, state in state_dict["state"].items()
        }
        groups = [
            {key: _to_json(value) for key, value in group.items()} for group in state_dict["param_groups"]
        ]
        return {"type": self.path, "steps": self.steps, "param_groups": groups, "scalars": scalars}

    def load_state(self, arrays: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        if meta.get("type") != self.path:
            raise ValueError(f"optimizer state of a {meta.get('type')}, this is a {self.path}")
        current = self.inner.state_dict()["param_groups"]
        groups = meta["param_groups"]
        if len(groups) != len(current):
            raise ValueError(f"optimizer state has {len(groups)} param groups, this optimizer {len(current)}")
        state: dict[int, dict[str, Any]] = {}
        for index, values in meta.get("scalars", {}).items():
            state.setdefault(int(index), {}).update(values)
        for key, value in arrays.items():
            _, index, name = key.split("/", 2)
            state.setdefault(int(index), {})[name] = value
        param_groups = [
            {key: _like(now.get(key), value) for key, value in saved.items()}
            for saved, now in zip(groups, current, strict=True)
        ]
        self.inner.load_state_dict({"state": state, "param_groups": param_groups})
        self.steps = int(meta["steps"])
