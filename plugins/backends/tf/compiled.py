"""Compiling a TF policy's functions: ``tf.function`` with a fixed signature, or eager for debugging.

``training.eager: true`` (or ``RLGEAR_TF_EAGER=1`` in the environment) runs the same Python code
eagerly instead, where errors point at the line that failed and ``print``/breakpoints work.

AutoGraph is off: rlgear's TF code branches and loops on Python values (config switches, shapes)
or with TF ops (``tf.where``, ``tf.scan``), never with Python control flow on a tensor's value, so
rewriting the source of every function a trace calls bought nothing and cost about a quarter of
each trace (four TF tests that trace learn steps: 41.5 s with it, 30 s without). A custom model or
loss that does branch on a tensor's value stops at its first trace with TF's error plus the ways
out: write the branch with ``tf.cond`` / ``tf.where``, decorate that function with ``@tf.function``
(AutoGraph converts it then), or set ``RLGEAR_TF_AUTOGRAPH=1`` to convert everything as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rlgear.plugins.backends.tf.runtime import tf

#: Environment variable that forces eager execution of TF policies (for debugging).
EAGER_ENV = "RLGEAR_TF_EAGER"
#: Environment variable that turns AutoGraph back on for every compiled function (see above).
AUTOGRAPH_ENV = "RLGEAR_TF_AUTOGRAPH"


def _true(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() in ("1", "true", "yes", "on")


def eager_requested(config: Any) -> bool:
    """``training.eager``, or ``RLGEAR_TF_EAGER`` set to a true value."""
    return bool(getattr(config.training, "eager", False)) or _true(EAGER_ENV)


def _spec(value: tf.Tensor) -> tf.TensorSpec:
    return tf.TensorSpec([None, *value.shape[1:]], value.dtype)


def _columns_key(tensors: dict[str, tf.Tensor]) -> tuple:
    """What a compiled function of these batch columns is traced for: names, dtypes, shapes past dim 0."""
    return tuple(sorted((k, v.dtype.name, tuple(v.shape[1:])) for k, v in tensors.items()))


class Compiled:
    """``fn`` under ``tf.function`` with a fixed input signature, called through its concrete function.

    Calling the concrete function skips the polymorphic dispatch of
    ``tf.function``. When the signature is a flat list of tensors (acting),
    calls go one step further, to ``ConcreteFunction._call_flat``, which also
    skips the binding and canonicalisation of arguments: for the small graphs
    RL acting runs, that binding costs more than executing the graph (TF
    2.21, CPU: 8-row actor-critic step 210 -> 135 us per call). It is TF's
    private API, so it is used only when it exists and only for arguments
    that are tensors of the signature's dtype and rank (checked in a few
    attribute reads); anything else goes through the public call, which
    raises TF's own error for a wrong input. Tracing happens on the first
    call, so functions a run never uses cost nothing.
    """

    def __init__(self, fn: Callable, input_signature: Any, jit_compile: bool = False):
        self.function = tf.function(
            fn, input_signature=input_signature, jit_compile=jit_compile, autograph=_true(AUTOGRAPH_ENV)
        )
        flat = isinstance(input_signature, list | tuple) and all(
            isinstance(spec, tf.TensorSpec) for spec in input_signature
        )
        self._flat_specs = [(spec.dtype, spec.shape.rank) for spec in input_signature] if flat else None
        self._concrete: Any = None
        self._call_flat: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        if self._concrete is None:
            self._concrete = self._trace()
            if self._flat_specs is not None:
                self._call_flat = getattr(self._concrete, "_call_flat", None)
        if self._call_flat is not None and self._fits_flat_signature(args):
            return self._call_flat(list(args), self._concrete.captured_inputs)
        return self._concrete(*args)

    def _trace(self) -> Any:
        try:
            return self.function.get_concrete_function()
        except tf.errors.OperatorNotAllowedInGraphError as err:
            if _true(AUTOGRAPH_ENV):
                raise
            raise tf.errors.OperatorNotAllowedInGraphError(
                f"{err}\nrlgear traces its TF functions without AutoGraph (docs/backends.md): "
                "write this branch with tf.cond / tf.where, decorate the function that holds it with "
                f"@tf.function, or set {AUTOGRAPH_ENV}=1 to convert every function as TF does by default",
            ) from err

    def _fits_flat_signature(self, args: tuple[Any, ...]) -> bool:
        specs = self._flat_specs
        return len(args) == len(specs) and all(
            isinstance(arg, tf.Tensor) and arg.dtype == dtype and arg.shape.rank == rank
            for arg, (dtype, rank) in zip(args, specs, strict=True)
        )
