"""Where a TF policy learns (``learners.device``, docs/learners.md): TF's GPUs by rlgear's names.

TF names its GPUs ``/GPU:<i>``; the config says ``cuda:<i>`` for every backend, so a run file
does not change with ``backend:``. Two things differ from torch, both TF's rules:

- **Device settings before the first op.** Hiding the GPUs (``learners.device: cpu``) is
  :func:`hide_gpus`, which only works before TF has run anything (shared/DEPENDENCY-NOTES.md: TF
  raises RuntimeError after); :meth:`TFBackend.use_device` calls it from ``Trainer.setup``, before
  any policy is built.
- **Variables stay where they are made.** A TF variable cannot move; the learner builds each
  policy inside :func:`device_scope` (``tf.device``), so its model and optimizer variables are
  made on its device, and :class:`TFPlacement` then runs every compiled function (learning, and
  acting without the numpy twin) under the same ``tf.device``.

Weights and optimizer state leave through ``.numpy()``, which copies to the host from any device,
so checkpoints stay device-neutral.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from rlgear.config.devices import check_device
from rlgear.plugins.backends.tf.runtime import tf


def tf_devices() -> list[str]:
    """``["cpu", "cuda:0", ...]``: the CPU and each GPU TF sees (hidden ones left out)."""
    visible = tf.config.get_visible_devices("GPU")
    return ["cpu"] + [f"cuda:{i}" for i in range(len(visible))]


def tf_device_name(device: str) -> str:
    """rlgear's device string as TF's: ``cpu`` -> ``/CPU:0``, ``cuda:N`` -> ``/GPU:N``."""
    if device == "cpu":
        return "/CPU:0"
    if device.startswith("cuda:"):
        return f"/GPU:{device.split(':', 1)[1]}"
    raise ValueError(f"TensorFlow has no device {device!r} (it knows cpu and cuda:N)")


def hide_gpus() -> None:
    """Make TF's GPUs invisible to this process (``learners.device: cpu``), before its first op.

    Nothing to do without GPUs. When TF already ran an op it can no longer change this: the run
    then goes on, each policy still pinned to the CPU by :func:`device_scope`, and a warning says so.
    """
    if not tf.config.list_physical_devices("GPU"):
        return
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:
        warnings.warn(
            "TensorFlow was already initialized in this process, so its GPUs stay visible; "
            "learners.device: cpu still builds and trains the policies on the CPU (tf.device)",
            RuntimeWarning,
            stacklevel=2,
        )


def device_scope(device: str) -> Any:
    """``tf.device`` of rlgear device ``device``: what a policy is built in."""
    return tf.device(tf_device_name(device))


class OnDevice:
    """A policy function called under ``tf.device``: a ``tf.function`` traces on first call, so its
    ops are placed on that device, and each call runs there."""

    def __init__(self, fn: Callable, device_name: str):
        self.fn = fn
        self.device_name = device_name

    def __call__(self, *args: Any) -> Any:
        with tf.device(self.device_name):
            return self.fn(*args)


class TFPlacement:
    """``to_device`` and the device every compiled function runs on; mixed into ``TFPolicy``."""

    #: rlgear's device string (``"cpu"``, ``"cuda:0"``): where this policy learns.
    device: str = "cpu"
    #: TF's name of it once :meth:`to_device` ran; None: TF's own placement (the CPU on a machine
    #: without GPUs).
    tf_device: str | None = None

    _compile: Callable[[], None]  # TFPolicy's: (re)builds the compiled functions

    def to_device(self, device: str) -> None:
        """Run learning (and acting without the numpy twin) on ``device`` (``cpu`` or ``cuda[:N]``).

        The compiled functions are rebuilt to trace and run under ``tf.device``. Variables are where
        they were made: the learner builds the policy inside the backend's ``device_scope`` so that
        is ``device``; a policy built elsewhere still learns correctly, TF copying its variables.
        Raises :class:`~rlgear.errors.DeviceError` for a device TF does not have here.
        """
        device = check_device(device, tf_devices())
        if device == self.device and self.tf_device is not None:
            return
        self.device = device
        self.tf_device = tf_device_name(device)
        self._compile()

    def on_device(self, fn: Callable) -> Callable:
        """``fn`` bound to this policy's device (unchanged until :meth:`to_device`)."""
        return fn if self.tf_device is None else OnDevice(fn, self.tf_device)
