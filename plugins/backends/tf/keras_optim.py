"""Any Keras optimizer (``training.optimizer: tf.keras.optimizers.AdamW``) behind TFPolicy's interface.

Why a wrapper: TFPolicy drives its optimizer through ``apply(grads)`` (inside
``tf.function``), an assignable ``lr`` (how ``lr_schedule`` reaches it) and
state as named arrays plus JSON (safetensors checkpoints, never pickle). A
Keras optimizer keeps its state in ``optimizer.variables`` (the iteration
count, the learning rate, then its slots per model variable), saved here as
``var/<index>`` arrays with their names and shapes in the JSON metadata. It is
built on the policy's variables up front, so no variable is created while a
``tf.function`` traces, and its learning rate is a variable: changing it never
retraces.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgear.errors import did_you_mean, unaccepted_keyword
from rlgear.plugins.backends.tf.runtime import tf

Fail = Callable[[str, str], Exception]


def resolve_class(path: str, fail: Fail) -> type:
    """The optimizer class at ``path``: ``tf.keras.optimizers.X``, ``keras.optimizers.X`` or ``module:Class``."""
    module_name, sep, attr = path.partition(":")
    parts = [module_name, *attr.split(".")] if sep else path.split(".")
    if not all(parts) or len(parts) < 2:
        raise fail(
            "training.optimizer", f"expected a dotted path such as tf.keras.optimizers.AdamW, got {path!r}"
        )
    obj: Any = tf if parts[0] == "tf" else None
    if obj is None:
        try:
            obj = importlib.import_module(parts[0])
        except ImportError as err:
            raise fail("training.optimizer", f"cannot import '{parts[0]}' of {path!r}: {err}") from None
    for i, part in enumerate(parts[1:], start=1):
        parent = obj
        obj = getattr(parent, part, None)
        if obj is None and parts[0] != "tf":
            try:
                obj = importlib.import_module(".".join(parts[: i + 1]))
            except ImportError:
                obj = None
        if obj is None:
            known = [n for n in dir(parent) if not n.startswith("_")]
            raise fail(
                "training.optimizer",
                f"{'.'.join(parts[:i])} has no attribute '{part}'{did_you_mean(part, known)}",
            )
    base = tf.keras.optimizers.Optimizer
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise fail("training.optimizer", f"{path!r} is not a Keras optimizer class (got {obj!r})")
    return obj


class KerasOptim:
    """A Keras optimizer with the interface of ``rlgear.plugins.backends.tf.optimizers.Optimizer``."""

    def __init__(
        self,
        cls: type,
        path: str,
        variables: Sequence[tf.Variable],
        lr: float,
        eps: float,
        kwargs: dict[str, Any],
        fail: Fail,
    ):
        self.variables = list(variables)
        self.path = path
        kwargs = dict(kwargs)
        if "lr" in kwargs or "learning_rate" in kwargs:
            raise fail(
                "training.optimizer_kwargs",
                "the learning rate comes from training.lr / training.lr_schedule, not from here",
            )
        parameters = inspect.signature(cls.__init__).parameters
        if "epsilon" in parameters:
            kwargs.setdefault("epsilon", eps)
        refused = unaccepted_keyword(cls.__init__, kwargs, skip=("learning_rate",))
        if refused:
            key, accepted = refused
            raise fail(
                f"training.optimizer_kwargs.{key}",
                f"{path} takes no argument '{key}'{did_you_mean(key, accepted)}",
            )
        try:
            self.inner = cls(learning_rate=float(lr), **kwargs)
        except (TypeError, ValueError) as err:
            raise fail("training.optimizer_kwargs", f"{path} refused them: {err}") from None
        self.inner.build(self.variables)

    @property
    def type_name(self) -> str:
        return self.path

    @property
    def lr(self) -> float:
        return float(np.asarray(self.inner.learning_rate))

    @lr.setter
    def lr(self, value: float) -> None:
        self.inner.learning_rate.assign(float(value))

    @property
    def steps(self) -> int:
        return int(np.asarray(self.inner.iterations))

    def apply(self, grads: Sequence[tf.Tensor]) -> None:
        """One update from ``grads`` (one per variable, in order; None: that variable is left alone);
        works inside ``tf.function``."""
        pairs = [(g, v) for g, v in zip(grads, self.variables, strict=True) if g is not None]
        self.inner.apply([g for g, _ in pairs], [v for _, v in pairs])

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {f"var/{i}": np.array(v.numpy()) for i, v in enumerate(self.inner.variables)}

    def state_meta(self) -> dict[str, Any]:
        return {
            "type": self.path,
            "steps": self.steps,
            "variables": [[v.path, list(v.shape)] for v in self.inner.variables],
        }

    def check_state(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Raise ValueError if the state does not fit; changes nothing."""
        if meta.get("type") != self.path:
            raise ValueError(f"optimizer state of a {meta.get('type')}, this is a {self.path}")
        for i, var in enumerate(self.inner.variables):
            key = f"var/{i}"
            if key not in arrays:
                raise ValueError(f"optimizer state is missing '{key}' ({var.path})")
            if tuple(np.shape(arrays[key])) != tuple(var.shape):
                raise ValueError(
                    f"optimizer state '{key}' ({var.path}) has shape {tuple(np.shape(arrays[key]))}, "
                    f"expected {tuple(var.shape)}"
                )

    def load_state(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        self.check_state(arrays, meta)
        for i, var in enumerate(self.inner.variables):
            var.assign(np.asarray(arrays[f"var/{i}"]).astype(var.dtype))
