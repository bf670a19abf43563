"""Threads, seeding and RNG state for TensorFlow."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from rlgear.backend import Backend
from rlgear.plugins.backends.tf.device import device_scope, hide_gpus, tf_devices
from rlgear.plugins.backends.tf.runtime import tf


def set_thread_pools(num_threads: int) -> None:
    """Size TF's intra- and inter-op pools to the run's CPU budget.

    TF fixes its pools at the first op and raises RuntimeError on a later
    change (shared/DEPENDENCY-NOTES.md), so this must run before anything
    touches a tensor. A second run in the same process with the same budget
    is fine; a different budget can't be applied and is reported.
    """
    threads = max(1, int(num_threads))
    threading = tf.config.threading
    if (
        threading.get_intra_op_parallelism_threads() == threads
        and threading.get_inter_op_parallelism_threads() == threads
    ):
        return
    try:
        threading.set_intra_op_parallelism_threads(threads)
        threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        current = threading.get_intra_op_parallelism_threads() or "TF's default number of"
        warnings.warn(
            f"TensorFlow was already initialized in this process; it keeps {current} intra-op "
            f"threads instead of workers.num_cpus_for_driver={threads}",
            RuntimeWarning,
            stacklevel=2,
        )


class TFBackend(Backend):
    framework = "tensorflow"
    description = (
        "TensorFlow 2 (CPU or GPU): the torch catalog with the same weight names, Categorical/DiagGaussian, "
        "Adam/SGD/RMSprop, learn step under tf.function (training.eager: true to debug)"
    )
    export_formats = ("savedmodel",)

    def export_policy(self, policy: Any, plan: Any, fmt: str, path: Any, explore: bool) -> tuple[list, list]:
        """A SavedModel folder at ``path`` (see :mod:`rlgear.plugins.backends.tf.export`)."""
        from rlgear.plugins.backends.tf import export

        module = export.build(policy, plan, explore)
        export.write(module, path)
        return module.input_specs, module.output_specs

    def exported_player(self, path: Any, fmt: str, input_names: list[str], output_names: list[str]) -> Any:
        from rlgear.plugins.backends.tf.export import SavedModelPlayer

        return SavedModelPlayer(path, input_names, output_names)

    def setup(self, num_threads: int, seed: int | None) -> None:
        set_thread_pools(num_threads)
        if seed is not None:
            tf.random.set_seed(seed)
            tf.random.set_global_generator(tf.random.Generator.from_seed(seed))

    def reseed(self, seed: int) -> None:
        tf.random.set_seed(int(seed))
        tf.random.set_global_generator(tf.random.Generator.from_seed(int(seed)))

    def get_rng_state(self) -> dict[str, np.ndarray]:
        # rlgear's own TF randomness lives in the policies' generators (saved with the
        # policy); this is the global generator user code may draw from.
        return {"tf_global_generator": tf.random.get_global_generator().state.numpy().copy()}

    def set_rng_state(self, state: dict[str, np.ndarray]) -> None:
        if "tf_global_generator" in state:
            tf.random.get_global_generator().reset(np.asarray(state["tf_global_generator"], dtype=np.int64))

    def devices(self) -> list[str]:
        """``cpu``, then ``cuda:<i>`` per GPU TF sees (TF's ``/GPU:<i>``)."""
        return tf_devices()

    def use_device(self, requested: str) -> None:
        """``cpu`` hides TF's GPUs (before its first op: ``setup`` ran nothing); other values leave
        them visible, each policy then built and run on its own device (:meth:`device_scope`)."""
        if requested == "cpu":
            hide_gpus()

    def device_scope(self, device: str) -> Any:
        """``tf.device`` of ``device``: a policy built inside has its variables there."""
        return device_scope(device)

    def version(self) -> str:
        return tf.__version__
