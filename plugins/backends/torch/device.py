"""Where a torch policy learns: the devices torch has here, and moving a policy and its batches there.

:class:`TorchPlacement` is one part of :class:`~rlgear.plugins.backends.torch.policy.TorchPolicy`
(``learners.device``, docs/learners.md). The model and the optimizer state live on
:attr:`TorchPlacement.device`; each learn call moves its batch columns there once
(:meth:`TorchPlacement.move_tensors`: pinned host memory and an asynchronous copy on CUDA), and
everything that leaves the policy (weights, gradients, optimizer state, statistics, TD errors)
comes back as CPU numpy, so rollout workers and checkpoints never see a device.

A policy part that holds tensors of its own beyond ``model`` and ``optimizer`` (target networks,
constants such as SAC's action bounds or C51's support) overrides :meth:`TorchPlacement.on_device`,
calling ``super().on_device(device)`` first.
"""

from __future__ import annotations

from typing import Any

import torch

from rlgear.config.devices import check_device


def torch_devices() -> list[str]:
    """``["cpu", "cuda:0", ..., "mps"]``: the devices torch can use here (CUDA devices as counted by
    the driver; no CUDA context is created)."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def synchronize(device: torch.device | str) -> None:
    """Wait for the work queued on ``device`` (CUDA and MPS run asynchronously; for timing)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class TorchPlacement:
    """``to_device`` and the host-to-device moves; mixed into ``TorchPolicy`` (which sets ``model``
    and ``optimizer``)."""

    model: torch.nn.Module
    optimizer: Any
    #: Where the model and the optimizer state live (the CPU until :meth:`to_device`).
    device: torch.device = torch.device("cpu")

    def to_device(self, device: str) -> None:
        """Move the model, the optimizer state and what :meth:`on_device` moves to ``device``
        (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``); later learn calls run there.

        Raises :class:`~rlgear.errors.DeviceError` for a device torch does not have here. Acting
        through the numpy twin stays on the CPU (it refreshes from :meth:`get_weights`).
        """
        target = torch.device(check_device(device, torch_devices()))
        if target == self.device:
            return
        before = dict(self.model.named_parameters())
        self.model.to(target)
        # Module.to keeps each Parameter object when the storage types are compatible (CPU <-> CUDA)
        # and makes new ones otherwise: the optimizer follows either way.
        replaced = {id(before[name]): param for name, param in self.model.named_parameters()}
        self.optimizer.to(target, replaced)
        self.device = target
        self.on_device(target)

    def on_device(self, device: torch.device) -> None:
        """Move the tensors this policy holds beside ``model`` and ``optimizer`` to ``device``
        (already :attr:`device`); overrides call ``super().on_device(device)`` first."""

    def to_device_tensor(self, tensor: torch.Tensor, pin: bool = True) -> torch.Tensor:
        """``tensor`` (on the host) on :attr:`device`: unchanged on the CPU; on CUDA through pinned
        memory with an asynchronous copy (``pin``; acting's few rows skip the pinning)."""
        device = self.device
        if device.type == "cpu":
            return tensor
        if device.type == "cuda" and pin:
            return tensor.pin_memory().to(device, non_blocking=True)
        return tensor.to(device)

    def move_tensors(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Every column of a learn call's batch on :attr:`device`, each moved once."""
        if self.device.type == "cpu":
            return tensors
        return {key: self.to_device_tensor(value) for key, value in tensors.items()}
