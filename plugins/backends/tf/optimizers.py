"""Adam, SGD and RMSprop on tf.Variables, with the torch backend's update rules.

The same arithmetic as ``rlgear.plugins.backends.torch.optimizers`` (Adam:
Kingma & Ba 2015 with bias correction, written in torch's order of
operations; RMSprop as torch's with ``alpha=0.99``), so the same gradients
give the same weights on both backends. ``tf.keras.optimizers`` differ in
details that matter for that (where epsilon enters Adam, RMSprop's epsilon
inside the square root), and their state names are Keras' own.

``apply`` works eagerly and inside ``tf.function``: the step count and the
learning rate are variables, so a changing learning rate never retraces. State
is saved as ``<buffer>/<index>`` arrays in the order of the model's
``named_variables()`` (which is the torch model's parameter order) plus JSON
metadata, the format the torch backend uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgear.errors import ConfigError, did_you_mean, unaccepted_keyword
from rlgear.plugins.backends.tf.runtime import tf


class Optimizer:
    """The interface TFPolicy uses: ``apply(grads)``, ``lr``, state as arrays + JSON."""

    #: per-variable state buffers, in the order of ``self.variables``
    buffer_names: tuple[str, ...] = ()

    def __init__(self, variables: Sequence[tf.Variable], lr: float):
        self.variables = list(variables)
        self._lr = tf.Variable(float(lr), dtype=tf.float32, trainable=False, name="lr")
        self._steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps")
        self.buffers = {
            name: [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.variables]
            for name in self.buffer_names
        }

    @property
    def lr(self) -> float:
        return float(self._lr.numpy())

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr.assign(float(value))

    @property
    def steps(self) -> int:
        return int(self._steps.numpy())

    def apply(self, grads: Sequence[tf.Tensor | None]) -> None:
        """One update from ``grads`` (one per variable, in order).

        A None gradient leaves its variable and that variable's state alone, as torch's
        optimizers skip a parameter without ``.grad`` (TD3's actor between delayed updates).
        """
        self._steps.assign_add(1)
        self._update(list(grads))

    def _update(self, grads: list[tf.Tensor]) -> None:
        raise TypeError(f"{type(self).__name__} must implement _update()")

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr}

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {
            f"{name}/{i}": b.numpy().copy() for name, bufs in self.buffers.items() for i, b in enumerate(bufs)
        }

    def state_meta(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "steps": self.steps, **self.hyperparameters()}

    def check_state(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Raise ValueError if the state does not fit; changes nothing."""
        if meta.get("type") != type(self).__name__:
            raise ValueError(f"optimizer state of a {meta.get('type')}, this is a {type(self).__name__}")
        for name, bufs in self.buffers.items():
            for i, buf in enumerate(bufs):
                key = f"{name}/{i}"
                if key not in arrays:
                    raise ValueError(f"optimizer state is missing '{key}'")
                if tuple(np.shape(arrays[key])) != tuple(buf.shape):
                    raise ValueError(
                        f"optimizer state '{key}' has shape {tuple(np.shape(arrays[key]))}, "
                        f"expected {tuple(buf.shape)}"
                    )

    def load_state(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        self.check_state(arrays, meta)
        for name, bufs in self.buffers.items():
            for i, buf in enumerate(bufs):
                buf.assign(np.asarray(arrays[f"{name}/{i}"], dtype=np.float32))
        self._steps.assign(int(meta["steps"]))


class Adam(Optimizer):
    buffer_names = ("exp_avg", "exp_avg_sq")

    def __init__(
        self,
        variables: Sequence[tf.Variable],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        super().__init__(variables, lr)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)

    def _update(self, grads: list[tf.Tensor]) -> None:
        beta1, beta2 = self.betas
        # Bias corrections in float64, as torch computes them in Python floats.
        t = tf.cast(self._steps, tf.float64)
        bias1 = 1.0 - tf.pow(tf.constant(beta1, tf.float64), t)
        bias2_sqrt = tf.sqrt(1.0 - tf.pow(tf.constant(beta2, tf.float64), t))
        step_size = tf.cast(tf.cast(self._lr, tf.float64) / bias1, tf.float32)
        bias2_sqrt = tf.cast(bias2_sqrt, tf.float32)
        for var, grad, m, v in zip(
            self.variables, grads, self.buffers["exp_avg"], self.buffers["exp_avg_sq"], strict=True
        ):
            if grad is None:
                continue
            m.assign(m + (1.0 - beta1) * (grad - m))  # torch's lerp
            v.assign(v * beta2 + (1.0 - beta2) * grad * grad)
            denom = tf.sqrt(v) / bias2_sqrt + self.eps
            var.assign_sub(step_size * (m / denom))

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "betas": list(self.betas), "eps": self.eps}


class SGD(Optimizer):
    def _update(self, grads: list[tf.Tensor]) -> None:
        for var, grad in zip(self.variables, grads, strict=True):
            if grad is not None:
                var.assign_sub(self._lr * grad)


class RMSprop(Optimizer):
    buffer_names = ("square_avg",)

    def __init__(self, variables: Sequence[tf.Variable], lr: float, alpha: float = 0.99, eps: float = 1e-8):
        super().__init__(variables, lr)
        self.alpha, self.eps = float(alpha), float(eps)

    def _update(self, grads: list[tf.Tensor]) -> None:
        for var, grad, s in zip(self.variables, grads, self.buffers["square_avg"], strict=True):
            if grad is None:
                continue
            s.assign(s * self.alpha + (1.0 - self.alpha) * grad * grad)
            var.assign_sub(self._lr * (grad / (tf.sqrt(s) + self.eps)))

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "alpha": self.alpha, "eps": self.eps}


BUILTINS: dict[str, type[Optimizer]] = {"adam": Adam, "sgd": SGD, "rmsprop": RMSprop}


def make_optimizer(
    name: str,
    variables: Sequence[tf.Variable],
    lr: float,
    eps: float,
    kwargs: dict[str, Any] | None = None,
    fail: Callable[[str, str], Exception] | None = None,
) -> Any:
    """The optimizer ``training.optimizer`` names, with the same arguments as the torch backend's.

    A built-in, or any Keras optimizer by dotted path (``tf.keras.optimizers.AdamW``).
    ``eps`` (``training.optimizer_epsilon``) goes to adam and to a Keras class that
    takes ``epsilon``, unless ``kwargs`` has one. ``fail(key, message)`` builds the
    config error (``RunConfig.fail``) for a bad path or kwargs.
    """
    fail = fail or _plain_fail
    kwargs = dict(kwargs or {})
    if name in BUILTINS:
        refused = unaccepted_keyword(BUILTINS[name].__init__, kwargs, skip=("variables", "lr"))
        if refused:
            key, accepted = refused
            raise fail(
                f"training.optimizer_kwargs.{key}",
                f"{name} takes no argument '{key}'{did_you_mean(key, accepted)} "
                f"(it takes: {', '.join(accepted) or 'none'})",
            )
        if name == "adam":
            kwargs.setdefault("eps", eps)
        try:
            return BUILTINS[name](variables, lr, **kwargs)
        except (TypeError, ValueError) as err:
            raise fail("training.optimizer_kwargs", f"{name} refused them: {err}") from None
    from rlgear.plugins.backends.tf.keras_optim import KerasOptim, resolve_class

    return KerasOptim(resolve_class(name, fail), name, variables, lr, eps, kwargs, fail)


def _plain_fail(path: str, message: str) -> Exception:
    return ConfigError(f"{path}: {message}")
