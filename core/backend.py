"""The backend contract (entry-point group ``rlgear.backends``).

A backend owns the framework: thread pools, seeding and RNG state, and the
public API its algorithms' policy modules import (base Policy class, model
catalog, action distributions, optimizers). Core never imports a framework; it
only calls this small interface, and only when a run asks for the backend.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from rlgear.config import devices as devices_mod
from rlgear.spaces import Space


class Backend(ABC):
    """Instantiated once per process that uses the framework."""

    #: Name of the framework (shown by ``rlgear plugins``).
    framework: ClassVar[str] = ""
    #: One line shown by ``rlgear plugins``.
    description: ClassVar[str] = ""

    @abstractmethod
    def setup(self, num_threads: int, seed: int | None) -> None:
        """Set the framework's thread pools and seed its global RNG."""

    @abstractmethod
    def get_rng_state(self) -> dict[str, np.ndarray]:
        """The framework's RNG state as arrays (stored in checkpoints)."""

    @abstractmethod
    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what ``get_rng_state`` returned."""

    def reseed(self, seed: int) -> None:
        """Seed the framework's global RNG again (threads untouched); PBT calls it after an exploit.

        The default does nothing: a backend whose framework draws global random
        numbers during training overrides it (the built-in ones do).
        """

    def version(self) -> str:
        """The framework's version, for ``rlgear plugins``; empty if unknown."""
        return ""

    #: True when :meth:`join_data_parallel_group` works: ``learners.num_learners >= 2`` is refused
    #: (one line naming the key) for a backend without it.
    supports_data_parallel: ClassVar[bool] = False

    def join_data_parallel_group(
        self, rank: int, world_size: int, address: str, port: int, device: str
    ) -> Any:
        """Join the learners' data-parallel group as learner ``rank`` of ``world_size`` (learner 0
        listens at ``address:port``); returns the object each policy keeps as ``data_parallel``.

        Called in each learner actor of a :class:`~rlgear.distributed.learner_group.LearnerGroup`
        with two or more learners, all at once; returns when every learner has joined.
        """
        raise NotImplementedError(f"backend '{self.framework}' has no data-parallel learners")

    # --- devices (``learners.device``, docs/learners.md) ----------------------------------------
    def devices(self) -> list[str]:
        """The devices this framework can learn on here: ``"cpu"`` first, then ``"cuda:<i>"`` per GPU
        and ``"mps"`` (Apple silicon). The default, for a framework that has only the CPU: ``["cpu"]``."""
        return ["cpu"]

    def check_device(self, requested: str) -> str:
        """``learners.device`` checked against :meth:`devices`: the concrete device it names
        (``cuda`` is ``cuda:0``), or ``"auto"``. Raises :class:`~rlgear.errors.DeviceError` (one line,
        exit 2 at the CLI) for a device that does not exist, naming those that do."""
        return devices_mod.check_device(requested, self.devices())

    def resolve_device(self, requested: str, observation_space: Space, model_config: Any) -> str:
        """The concrete device (``"cpu"``, ``"cuda:0"``, ``"mps"``) a policy with these observations and
        this ``model:`` section learns on; ``auto`` follows :func:`rlgear.config.devices.resolve_device`
        (an accelerator for conv and LSTM models when there is one, else the CPU)."""
        return devices_mod.resolve_device(requested, self.devices(), observation_space, model_config)

    def use_device(self, requested: str) -> None:
        """Called once by ``Trainer.setup`` after :meth:`setup`, before any policy exists, with the
        checked ``learners.device``: for a framework whose device settings must be made before its
        first op (TensorFlow hides its GPUs for ``cpu``). The default does nothing."""

    def device_scope(self, device: str) -> contextlib.AbstractContextManager[Any]:
        """A context the learner builds a policy for ``device`` in (TensorFlow: ``tf.device``, so its
        variables are created there). The default, for frameworks that move a built model
        (``Policy.to_device``): nothing."""
        return contextlib.nullcontext()

    # --- export (rlgear export) ----------------------------------------------------------------
    #: The formats ``rlgear export`` writes with this backend (``onnx``, ``torchscript``, ``savedmodel``).
    export_formats: ClassVar[tuple[str, ...]] = ()

    def export_policy(self, policy: Any, plan: Any, fmt: str, path: Any, explore: bool) -> tuple[list, list]:
        """Write ``policy`` as ``fmt`` to ``path`` with ``plan``
        (:class:`rlgear.export.signature.ObservationPlan`) in front of it, and return its
        ``(inputs, outputs)`` as :class:`~rlgear.export.signature.TensorSpec` lists. Only called
        for a format in :attr:`export_formats`; a backend that exports nothing never is."""
        raise NotImplementedError(f"the {self.framework or type(self).__name__} backend exports no format")

    def exported_player(self, path: Any, fmt: str, input_names: list[str], output_names: list[str]) -> Any:
        """``player(feeds: {input name: array}) -> {output name: array}`` running an exported file
        in this backend's framework (``rlgear export --check``, parity tests)."""
        raise NotImplementedError(f"the {self.framework or type(self).__name__} backend plays no format")


class NoFrameworkBackend(Backend):
    """The backend of a run whose policy is framework-free (:class:`~rlgear.numpy_policy.NumpyPolicy`).

    Why in core: such a run must work with no backend plugin installed and import no
    framework, whatever its ``backend:`` value says. It owns what a framework-free
    policy may draw from besides its own Generators: numpy's legacy global RNG.
    """

    framework = "numpy"
    description = "no framework: numpy only (framework-free policies)"

    def setup(self, num_threads: int, seed: int | None) -> None:
        if seed is not None:  # numpy's BLAS threads are fixed when numpy is imported
            np.random.seed(seed % 2**32)

    def reseed(self, seed: int) -> None:
        np.random.seed(int(seed) % 2**32)

    def get_rng_state(self) -> dict[str, np.ndarray]:
        _, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
        return {
            "numpy_keys": np.array(keys, dtype=np.uint32),
            "numpy_pos": np.array([pos, has_gauss], dtype=np.int64),
            "numpy_gauss": np.array([cached_gaussian], dtype=np.float64),
        }

    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        if "numpy_keys" in state:
            pos, has_gauss = (int(v) for v in state["numpy_pos"])
            np.random.set_state(
                ("MT19937", state["numpy_keys"], pos, has_gauss, float(state["numpy_gauss"][0]))
            )

    def version(self) -> str:
        return np.__version__


def backend_class_for(policy_class: type, backend: str) -> type[Backend]:
    """The backend a process running ``policy_class`` sets up: none of the framework plugins for a
    framework-free policy (so no framework is imported), else the ``backend:`` plugin."""
    if getattr(policy_class, "framework_free", False):
        return NoFrameworkBackend
    from rlgear.discovery import registry

    return registry.load_backend(backend)
