"""Which device learns: ``learners.device`` checked against the devices a backend has, and ``auto``.

Framework-free on purpose: a backend lists its devices (:meth:`rlgear.backend.Backend.devices`,
strings such as ``"cpu"``, ``"cuda:0"``, ``"mps"``) and everything else, the check that a
requested device exists, its error and the ``auto`` rule, is written once here for every backend.

The ``auto`` rule: an accelerator (the first CUDA device, else MPS) when the machine has one
*and* the policy's model is a conv net (image observations) or an LSTM; else the CPU. A small
MLP's update is a few dozen tiny kernels, where a GPU's launch and transfer latency costs more
than the arithmetic it saves (Stable-Baselines3 warns the same for MLP PPO on a GPU); conv and
LSTM updates are large enough to gain.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rlgear.config.conv import conv_layers
from rlgear.errors import DeviceError
from rlgear.spaces import Space

__all__ = [
    "DEVICE_KEY",
    "check_device",
    "device_error",
    "prefers_accelerator",
    "resolve_device",
]

#: The config key the errors name.
DEVICE_KEY = "learners.device"
_CUDA = re.compile(r"cuda(?::(\d+))?")


def _missing(requested: str) -> str:
    """What is missing, in words: 'no CUDA device', 'no device cuda:1', 'no MPS device'."""
    if requested == "cuda":
        return "no CUDA device"
    if requested == "mps":
        return "no MPS device (Apple silicon)"
    return f"no device {requested}"


def device_error(requested: str, available: Sequence[str]) -> DeviceError:
    """The error for ``requested`` absent from ``available``: names the key, the request and what exists."""
    detail = (
        f"{requested!r} asked for, but this machine has {_missing(requested)} "
        f"(devices here: {', '.join(available) or 'none'})"
    )
    return DeviceError(f"{DEVICE_KEY}: {detail}", detail)


def check_device(requested: str, available: Sequence[str]) -> str:
    """The concrete device ``requested`` names (``cuda`` is ``cuda:0``), or ``auto`` unchanged.

    Raises :class:`~rlgear.errors.DeviceError` when it names a device not in ``available``.
    """
    if requested == "auto":
        return requested
    match = _CUDA.fullmatch(requested)
    device = f"cuda:{match.group(1) or 0}" if match else requested
    if device not in available:
        raise device_error(requested, available)
    return device


def prefers_accelerator(observation_space: Space, model_config: Any) -> bool:
    """Whether ``auto`` puts this policy on an accelerator: its model is recurrent (an LSTM or
    attention memory) or has a conv trunk."""
    if bool(getattr(model_config, "lstm", False) or getattr(model_config, "attention", False)):
        return True
    return conv_layers(observation_space, model_config) is not None


def resolve_device(
    requested: str, available: Sequence[str], observation_space: Space, model_config: Any
) -> str:
    """The device a policy learns on: ``requested`` checked (:func:`check_device`), or for ``auto``
    the first accelerator of ``available`` when :func:`prefers_accelerator`, else ``"cpu"``."""
    device = check_device(requested, available)
    if device != "auto":
        return device
    if not prefers_accelerator(observation_space, model_config):
        return "cpu"
    accelerators = [d for d in available if d.startswith("cuda")] or [d for d in available if d == "mps"]
    return accelerators[0] if accelerators else "cpu"
