"""Writing a TF policy as a SavedModel, with rlgear's preprocessing inside the graph.

The graph is :class:`ExportedPolicy`: :class:`ObservationInput` (the env's observation leaves ->
the flat float32 row the model reads: one-hots, the image first, the frozen observation filter)
in front of the policy's :class:`~rlgear.plugins.backends.tf.export_heads.ExportHead`, served by
one ``tf.function`` with a fixed input signature (a dynamic batch dimension). What it takes and
gives is fixed by :mod:`rlgear.export.signature`, the same for every format, so the SavedModel
of a checkpoint and its ONNX file take and give the same tensors.

Signature naming: the ``serving_default`` SignatureDef's input and output keys are exactly the
sidecar's names, dots included (``obs.cue``, ``state_in.0``, ``action.0``): TF 2.21 keeps them
as written in the SignatureDef (what TF Serving, the C API and ``saved_model_cli`` show). Only
the Python keyword names of the loaded function (``structured_input_signature``) are the names
with ``.`` replaced by ``_``, as Python identifiers need; the loaded function accepts the
sidecar's names as keywords as well (:class:`SavedModelPlayer` calls it that way). Two input
names that differ only in ``.`` against ``_`` would clash there, so :func:`build` refuses them.

The exported module holds copies of the policy's variables (``copy.deepcopy`` of the model), so
exporting changes nothing in the live policy (a server exports while it learns; DQN's noisy
layers are zeroed on the copy only).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from rlgear.errors import RLGearError
from rlgear.export.signature import ObservationPlan, TensorSpec, explore_refused
from rlgear.plugins.backends.tf.export_heads import ExportHead, LayerStackHead
from rlgear.plugins.backends.tf.runtime import tf

#: the SignatureDef key of the exported graph (TF Serving's default)
SIGNATURE_KEY = "serving_default"


class ObservationInput(tf.Module):
    """The observation inputs -> the model's flat input ``[B, F]`` and the action mask (or None)."""

    def __init__(self, plan: ObservationPlan):
        super().__init__()
        self.encodings = [(e.leaf, e.kind, e.sizes) for e in plan.encodings]
        self.mask_leaf = plan.mask_leaf
        self.filter = None
        if plan.filter is not None:
            f = plan.filter
            std = np.sqrt(f.var.reshape(-1) + f.epsilon)  # float64, then float32: as the torch graph
            self.filter = (
                tf.constant(f.mean.reshape(-1).astype(np.float32)),
                tf.constant(std.astype(np.float32)),
                float(f.clip),
                int(f.passthrough),
            )

    def __call__(self, leaves: list[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor | None]:
        columns = []
        for leaf, kind, sizes in self.encodings:
            x = leaves[leaf]
            batch = tf.shape(x)[0]
            if kind == "float":
                columns.append(tf.reshape(tf.cast(x, tf.float32), [batch, -1]))
                continue
            index = tf.reshape(tf.cast(x, tf.int64), [batch, -1])
            for j, n in enumerate(sizes):  # an index outside [0, n) gives zeros, as the torch graph's
                columns.append(tf.one_hot(index[:, j], n, dtype=tf.float32))
        flat = tf.concat(columns, axis=-1) if len(columns) > 1 else columns[0]
        if self.filter is not None:
            mean, std, clip, passthrough = self.filter
            head, rest = flat[:, :passthrough], flat[:, passthrough:]
            rest = tf.clip_by_value((rest - mean) / std, -clip, clip)
            flat = tf.concat([head, rest], axis=-1) if passthrough else rest
        mask = None if self.mask_leaf is None else leaves[self.mask_leaf] > 0.5
        return flat, mask


class ExportedPolicy(tf.Module):
    """``serve(*inputs)``: the observation leaves, then the head's extra inputs -> ``{output name: tensor}``."""

    def __init__(self, plan: ObservationPlan, head: ExportHead, inputs: list[TensorSpec]):
        super().__init__()
        self.observation = ObservationInput(plan)
        self.head = head
        self.num_leaves = len(plan.leaves)
        self.input_specs = list(inputs)
        self.output_specs = list(head.outputs)
        signature = [tf.TensorSpec([None, *spec.shape[1:]], spec.dtype, name=spec.name) for spec in inputs]
        self.serve = tf.function(self._serve, input_signature=signature, autograph=False)

    def _serve(self, *inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        flat, mask = self.observation(list(inputs[: self.num_leaves]))
        outputs = self.head(flat, mask, list(inputs[self.num_leaves :]))
        if len(outputs) != len(self.output_specs):
            raise RuntimeError(
                f"the export head gave {len(outputs)} outputs for {len(self.output_specs)} specs"
            )
        return {
            spec.name: tf.cast(value, spec.dtype)
            for spec, value in zip(self.output_specs, outputs, strict=True)
        }


def _check_names(specs: list[TensorSpec]) -> None:
    python_names = {}
    for spec in specs:
        other = python_names.setdefault(spec.name.replace(".", "_"), spec.name)
        if other != spec.name:
            raise RLGearError(
                f"--format savedmodel: inputs '{other}' and '{spec.name}' would share the SavedModel's "
                "Python keyword name (TF writes '.' as '_'); rename one of the observation's keys"
            )


def build(policy: Any, plan: ObservationPlan, explore: bool) -> ExportedPolicy:
    """The graph of ``policy`` over copies of its variables (on the CPU), with its input specs."""
    with tf.device("/CPU:0"):
        if getattr(policy, "framework_free", False):  # ES, ARS: their numpy MLP, rebuilt in TF
            if explore:
                raise explore_refused(
                    f"{policy.config.algorithm}'s policy acts deterministically (its exploration is the "
                    "trainer's parameter noise)"
                )
            head: ExportHead = LayerStackHead(
                policy.get_weights(), policy.config.model.activation, policy.action_space
            )
        else:
            # A copy: the live policy keeps its variables (and device) untouched.
            head = copy.deepcopy(policy.export_head(explore))
        inputs = [leaf.spec for leaf in plan.leaves] + list(head.extra_inputs)
        _check_names(inputs)
        return ExportedPolicy(plan, head, inputs)


def write(module: ExportedPolicy, path: Path) -> None:
    """Write ``module`` as a SavedModel folder at ``path`` (the caller makes it atomic)."""
    with tf.device("/CPU:0"):
        concrete = module.serve.get_concrete_function()
        tf.saved_model.save(module, str(path), signatures={SIGNATURE_KEY: concrete})


class SavedModelPlayer:
    """Runs a SavedModel export on numpy inputs (for ``rlgear export --check`` and parity tests): its
    ``serving_default`` signature, called with the sidecar's input names."""

    def __init__(self, path: str | Path, input_names: list[str], output_names: list[str]):
        self.module = tf.saved_model.load(str(path))
        self.function = self.module.signatures[SIGNATURE_KEY]
        self.input_names, self.output_names = input_names, output_names

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.function(**{name: tf.constant(np.asarray(feeds[name])) for name in self.input_names})
        return {name: outputs[name].numpy() for name in self.output_names}
