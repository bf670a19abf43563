"""Writing a torch policy as ONNX or TorchScript, with rlgear's preprocessing inside the graph.

The graph is ``ExportedPolicy``: :class:`ObservationInput` (the env's observation leaves ->
the flat float32 row the model reads: one-hots, the image first, the frozen observation
filter) in front of the policy's :class:`~rlgear.plugins.backends.torch.export_heads.ExportHead`.
What it takes and gives is fixed by :mod:`rlgear.export.signature`, the same for every format.

ONNX goes through ``torch.onnx.export(dynamo=True)`` (torch.export + onnxscript, torch's
supported exporter since 2.9); TorchScript through ``torch.jit.trace``. Both get a dynamic batch
dimension.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import warnings
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rlgear.errors import RLGearError
from rlgear.export.signature import ObservationPlan, TensorSpec, explore_refused
from rlgear.plugins.backends.torch.export_heads import ExportHead, LayerStackHead


class ObservationInput(nn.Module):
    """The observation inputs -> the model's flat input ``[B, F]`` and the action mask (or None)."""

    def __init__(self, plan: ObservationPlan):
        super().__init__()
        self.encodings = [(e.leaf, e.kind, e.sizes) for e in plan.encodings]
        self.mask_leaf = plan.mask_leaf
        for i, (_, kind, sizes) in enumerate(self.encodings):
            if kind != "float":
                self.register_buffer(f"range_{i}", torch.arange(max(sizes), dtype=torch.int64))
        self.filtered = plan.filter is not None
        if plan.filter is not None:
            f = plan.filter
            std = np.sqrt(f.var.reshape(-1) + f.epsilon)
            self.register_buffer("filter_mean", torch.as_tensor(f.mean.reshape(-1), dtype=torch.float32))
            self.register_buffer("filter_std", torch.as_tensor(std, dtype=torch.float32))
            self.clip = f.clip
            self.passthrough = f.passthrough

    def forward(self, leaves: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        columns = []
        for i, (leaf, kind, sizes) in enumerate(self.encodings):
            x = leaves[leaf]
            if kind == "float":
                columns.append(x.reshape(x.shape[0], -1).to(torch.float32))
                continue
            index = x.reshape(x.shape[0], -1).to(torch.int64)
            arange = getattr(self, f"range_{i}")
            for j, n in enumerate(sizes):
                columns.append((index[:, j : j + 1] == arange[:n]).to(torch.float32))
        flat = torch.cat(columns, dim=-1) if len(columns) > 1 else columns[0]
        if self.filtered:
            head, rest = flat[:, : self.passthrough], flat[:, self.passthrough :]
            rest = torch.clamp((rest - self.filter_mean) / self.filter_std, -self.clip, self.clip)
            flat = torch.cat([head, rest], dim=-1) if self.passthrough else rest
        mask = None if self.mask_leaf is None else leaves[self.mask_leaf] > 0.5
        return flat, mask


class ExportedPolicy(nn.Module):
    """``forward(*inputs)``: the observation leaves, then the head's extra inputs -> its outputs."""

    def __init__(self, plan: ObservationPlan, head: ExportHead):
        super().__init__()
        self.observation = ObservationInput(plan)
        self.head = head
        self.num_leaves = len(plan.leaves)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        flat, mask = self.observation(list(inputs[: self.num_leaves]))
        return self.head(flat, mask, list(inputs[self.num_leaves :]))


def example_inputs(specs: list[TensorSpec], batch: int = 2) -> tuple[torch.Tensor, ...]:
    """Zeros of every input (a batch of 2, so no exporter specialises the batch dimension to 1)."""
    return tuple(
        torch.zeros((batch, *(d or 1 for d in spec.shape[1:])), dtype=getattr(torch, spec.dtype))
        for spec in specs
    )


def build(policy: Any, plan: ObservationPlan, explore: bool) -> tuple[ExportedPolicy, list[TensorSpec]]:
    """The graph of ``policy`` (on the CPU, in eval mode) and its input specs."""
    if getattr(policy, "framework_free", False):  # ES, ARS: their numpy MLP, rebuilt in torch
        if explore:
            raise explore_refused(
                f"{policy.config.algorithm}'s policy acts deterministically (its exploration is the "
                "trainer's parameter noise)"
            )
        head: ExportHead = LayerStackHead(
            policy.get_weights(), policy.config.model.activation, policy.action_space
        )
    else:
        head = policy.export_head(explore)
    # A copy: the live policy keeps its device and training state (a server exports while it learns).
    module = copy.deepcopy(ExportedPolicy(plan, head)).to("cpu").eval()
    inputs = [leaf.spec for leaf in plan.leaves] + list(head.extra_inputs)
    return module, inputs


#: The last ONNX graph exported for a policy (weakly held), and the structure it was exported with:
#: a live policy exported again after an update (a server handing clients each new version) gets
#: that graph with its new weights written in, milliseconds instead of the exporter's seconds.
_ONNX_TEMPLATES: weakref.WeakKeyDictionary[Any, tuple[tuple, Any]] = weakref.WeakKeyDictionary()


def write(module: ExportedPolicy, inputs: list[TensorSpec], fmt: str, path: Path, owner: Any = None) -> None:
    """Write ``module`` as ``fmt`` (``onnx`` or ``torchscript``) to ``path`` (the caller makes it atomic).

    ``owner``: the policy ``module`` was built from; an ONNX export of the same structure as its last
    one reuses that graph with the new weights and statistics (:data:`_ONNX_TEMPLATES`).
    """
    examples = example_inputs(inputs)
    names = [spec.name for spec in module.head.outputs]
    if fmt == "onnx":
        key = _structure(module, inputs)
        template = _ONNX_TEMPLATES.get(owner) if owner is not None else None
        if template is not None and template[0] == key and _write_with_weights(template[1], module, path):
            return
        _write_onnx(module, inputs, examples, names, path)
        if owner is not None:
            import onnx

            _ONNX_TEMPLATES[owner] = (key, onnx.load(str(path)))
    elif fmt == "torchscript":
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings about Python values that do not vary here
            traced = torch.jit.trace(module, examples, check_trace=False)
        traced.save(str(path))
    else:
        raise RLGearError(f"--format: the torch backend writes onnx and torchscript, not {fmt!r}")


def _write_onnx(
    module: ExportedPolicy, inputs: list[TensorSpec], examples: tuple, output_names: list[str], path: Path
) -> None:
    try:
        import onnxscript  # noqa: F401  (torch's exporter needs it; say so before torch fails deep inside)
    except ImportError as err:
        raise RLGearError("--format onnx needs onnx and onnxscript: pip install 'rlgear[export]'") from err
    batch = torch.export.Dim("batch", min=1)
    dynamic = (tuple({0: batch} for _ in inputs),)  # forward(*inputs): one tuple of them
    quiet = logging.getLogger("torch.onnx")  # "torchvision is not installed. Skipping ..." warnings
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, examples, input_names=[s.name for s in inputs], output_names=output_names,
            # optimize=False: onnxruntime optimizes the graph when it loads it anyway, and unoptimized
            # the file keeps one initializer per state_dict tensor, by name (what _write_with_weights needs)
            dynamic_shapes=dynamic, dynamo=True, verbose=False, optimize=False,
        )  # fmt: skip
    quiet.setLevel(level)
    program.save(str(path))


def _structure(module: ExportedPolicy, inputs: list[TensorSpec]) -> tuple:
    """Everything an ONNX graph's ops depend on besides the values of its weights and statistics."""
    tensors = tuple(
        (name, tuple(value.shape), str(value.dtype)) for name, value in module.state_dict().items()
    )
    constants = repr(
        (module.observation.encodings, module.observation.mask_leaf, getattr(module.observation, "clip", None),
         getattr(module.observation, "passthrough", None), type(module.head).__name__,
         getattr(module.head, "explore", None), [s.to_json() for s in module.head.outputs])
    )  # fmt: skip
    return tensors, tuple(s.name for s in inputs), constants


def _write_with_weights(template: Any, module: ExportedPolicy, path: Path) -> bool:
    """Write ``template`` (an ONNX ModelProto) with every initializer named as a ``module`` tensor replaced
    by that tensor's current value (the unoptimized export names initializers by their state_dict keys);
    False, writing nothing, when the template does not hold every tensor by name."""
    from onnx import numpy_helper

    model = copy.deepcopy(template)
    values = {name: value.detach().cpu().numpy() for name, value in module.state_dict().items()}
    replaced = 0
    for initializer in model.graph.initializer:
        if initializer.name in values:
            initializer.CopyFrom(numpy_helper.from_array(values[initializer.name], initializer.name))
            replaced += 1
    if replaced != len(values):  # the exporter named or folded something differently: never guess
        return False
    path.write_bytes(model.SerializeToString())
    return True


class TorchScriptPlayer:
    """Runs a TorchScript export on numpy inputs (for ``rlgear export --check`` and parity tests)."""

    def __init__(self, path: str | Path, input_names: list[str], output_names: list[str]):
        with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript; the user chose the format
            warnings.simplefilter("ignore", DeprecationWarning)
            self.module = torch.jit.load(str(path), map_location="cpu")
        self.input_names, self.output_names = input_names, output_names

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            outputs = self.module(*(torch.from_numpy(np.asarray(feeds[n])) for n in self.input_names))
        return {name: value.numpy() for name, value in zip(self.output_names, outputs, strict=True)}
