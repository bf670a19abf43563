"""``rlgear export``: a checkpoint's policy written as ONNX, TorchScript or a SavedModel.

Any checkpoint exports to any format, whichever backend trained it: the weights are
framework-neutral, so the policy is rebuilt in the format's framework (``backend=torch`` for
ONNX and TorchScript, ``backend=tf`` for a SavedModel) with :func:`rlgear.load` and written by
that backend (:meth:`rlgear.backend.Backend.export_policy`).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

from rlgear.backend import backend_class_for
from rlgear.errors import RLGearError
from rlgear.export import sidecar as sidecar_mod
from rlgear.export.signature import FORMAT_BACKENDS, observation_plan
from rlgear.numpy_policy import NumpyMLPPolicy

_EXTRAS = {"torch": "pip install 'rlgear[torch,export]'", "tf": "pip install 'rlgear[tf]'"}


@dataclasses.dataclass(frozen=True)
class Exported:
    """What :func:`export` wrote: the file (a folder for a SavedModel) and its sidecar."""

    path: Path
    sidecar_path: Path
    sidecar: dict[str, Any]


def check_format(fmt: str) -> str:
    if fmt not in FORMAT_BACKENDS:
        raise RLGearError(f"--format: expected one of {', '.join(FORMAT_BACKENDS)}, got {fmt!r}")
    return fmt


def export(
    source: str | os.PathLike,
    fmt: str,
    out: str | os.PathLike,
    explore: bool = False,
    policy_id: str | None = None,
) -> Exported:
    """Export the policy of checkpoint (or run folder) ``source`` as ``fmt`` to ``out``, with a sidecar
    ``out.json``. Nothing is left half-written: both appear only when both are complete."""
    from rlgear.run import agent
    from rlgear.run import checkpoint as ckpt

    check_format(fmt)
    backend_name = FORMAT_BACKENDS[fmt]
    out = sidecar_mod.prepare_out(out, is_folder=fmt == "savedmodel")
    try:
        loaded = agent.load(source, overrides=[f"backend={backend_name}"], policy_id=policy_id)
    except ImportError as err:
        raise RLGearError(f"--format {fmt} needs {backend_name}: {_EXTRAS[backend_name]} ({err})") from None
    folder = ckpt.resolve_path(source)
    arrays, state, raw_config, _ = ckpt.read(folder)
    ids = ckpt.checkpoint_policy_ids(arrays, state)
    trained_with = str(raw_config.get("backend", "torch"))
    with sidecar_mod.atomic_target(out) as tmp:
        data = write_policy(loaded, fmt, tmp, explore)
        data.update(
            checkpoint=str(folder.resolve()),
            policy_id=policy_id or ids[0],
            config_sha256=sidecar_mod.config_hash(raw_config),
            trained_with_backend=trained_with,
            file=out.name,
            file_sha256=sidecar_mod.file_hash(tmp),
        )
        side = sidecar_mod.write_sidecar(out, data)
    return Exported(out, side, data)


def write_policy(loaded: Any, fmt: str, path: Path, explore: bool) -> dict[str, Any]:
    """Write ``loaded`` (a :class:`rlgear.run.agent.LoadedPolicy`) as ``fmt`` to ``path``; return the
    sidecar's description of it (inputs, outputs, spaces, preprocessing)."""
    import rlgear

    policy = loaded.policy
    backend_cls = backend_class_for(type(policy), loaded.config.backend)
    if isinstance(policy, NumpyMLPPolicy):
        # ES/ARS's numpy MLP: the format's framework rebuilds it from the weights
        from rlgear.discovery import registry

        backend_cls = registry.load_backend(FORMAT_BACKENDS[fmt])
    if fmt not in backend_cls.export_formats:
        kind = (
            "a framework-free policy"
            if backend_cls.framework == "numpy"
            else f"the {backend_cls.framework} backend"
        )
        raise RLGearError(
            f"--format {fmt}: algorithm '{loaded.config.algorithm}' has {kind}, which cannot be written as "
            f"{fmt}{' (rlgear.inference.load acts with it in numpy)' if backend_cls.framework == 'numpy' else ''}"
        )
    plan = observation_plan(loaded.preprocessor, loaded.obs_filter)
    backend = backend_cls()
    try:
        inputs, outputs = backend.export_policy(policy, plan, fmt, path, explore)
    except RLGearError:
        raise
    except Exception as err:  # the exporter could not express some part of the model
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RLGearError(
            f"--format {fmt}: {type(policy).__name__} ({loaded.config.algorithm}, model "
            f"{_model_kind(loaded.config)}) could not be written as {fmt}: {first[:300]}"
        ) from err
    recurrent = bool(getattr(policy, "recurrent", False))
    return {
        "sidecar_version": sidecar_mod.SIDECAR_VERSION,
        "format": fmt,
        "rlgear_version": rlgear.__version__,
        "exported_with": f"{backend_cls.framework} {backend.version()}",
        "algorithm": loaded.config.algorithm,
        "explore": bool(explore),
        "recurrent": recurrent,
        "observation_space": loaded.observation_space.to_json(),
        "action_space": loaded.action_space.to_json(),
        "inputs": [spec.to_json() for spec in inputs],
        "outputs": [spec.to_json() for spec in outputs],
        "preprocessing": plan.to_json(),
    }


def _model_kind(config: Any) -> str:
    model = config.model
    if getattr(model, "custom", None):
        return f"custom {model.custom}"
    parts = [
        "lstm"
        if getattr(model, "lstm", False)
        else "attention"
        if getattr(model, "attention", False)
        else "mlp"
    ]
    if getattr(model, "conv_filters", None):
        parts.insert(0, "conv")
    return "+".join(parts)


def policy_onnx(loaded: Any, explore: bool = True) -> tuple[bytes, dict[str, Any]]:
    """``(ONNX bytes, sidecar)`` of a live policy (``loaded``: a :class:`rlgear.run.agent.LoadedPolicy`
    around it), in memory: what a server hands a client that acts locally."""
    with tempfile.TemporaryDirectory(prefix="rlgear-export-") as folder:
        path = Path(folder) / "policy.onnx"
        data = write_policy(loaded, "onnx", path, explore)
        return path.read_bytes(), data
