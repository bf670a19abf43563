"""Threads, seeding and RNG state for torch."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlgear.backend import Backend
from rlgear.plugins.backends.torch.device import torch_devices


class TorchBackend(Backend):
    framework = "torch"
    description = "PyTorch (CPU or GPU): MLP catalog, Categorical/DiagGaussian, Adam/SGD/RMSprop"
    export_formats = ("onnx", "torchscript")

    def export_policy(self, policy: Any, plan: Any, fmt: str, path: Any, explore: bool) -> tuple[list, list]:
        from rlgear.plugins.backends.torch import export

        module, inputs = export.build(policy, plan, explore)
        export.write(module, inputs, fmt, path, owner=policy)
        return inputs, list(module.head.outputs)

    def exported_player(self, path: Any, fmt: str, input_names: list[str], output_names: list[str]) -> Any:
        from rlgear.plugins.backends.torch.export import TorchScriptPlayer

        return TorchScriptPlayer(path, input_names, output_names)

    def setup(self, num_threads: int, seed: int | None) -> None:
        # One intra-op thread is fastest for the small networks RL uses, and it
        # does not collapse when another process is busy (DEPENDENCY-NOTES.md:
        # a 13x slowdown with 2 threads on a loaded 2-core machine).
        torch.set_num_threads(max(1, int(num_threads)))
        if seed is not None:
            torch.manual_seed(seed)

    def reseed(self, seed: int) -> None:
        torch.manual_seed(int(seed))

    def get_rng_state(self) -> dict[str, np.ndarray]:
        return {"torch": torch.get_rng_state().numpy().copy()}

    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        if "torch" in state:
            torch.set_rng_state(torch.from_numpy(np.ascontiguousarray(state["torch"], dtype=np.uint8)))

    def devices(self) -> list[str]:
        """``cpu``, then ``cuda:<i>`` per CUDA device torch sees, then ``mps`` on Apple silicon."""
        return torch_devices()

    def version(self) -> str:
        return torch.__version__

    supports_data_parallel = True

    def join_data_parallel_group(
        self, rank: int, world_size: int, address: str, port: int, device: str
    ) -> Any:
        """A ``torch.distributed`` group (gloo on CPU, NCCL on CUDA): :mod:`.data_parallel`."""
        from rlgear.plugins.backends.torch.data_parallel import DataParallelGroup

        return DataParallelGroup(rank, world_size, address, port, device)
