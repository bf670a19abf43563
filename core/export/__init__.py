"""Export for deployment: a checkpoint's policy as ONNX, TorchScript or a SavedModel.

``rlgear export CHECKPOINT --format onnx --out policy.onnx`` writes the file and its sidecar
``policy.onnx.json``; ``rlgear export --check policy.onnx`` verifies it against its checkpoint.
The graph takes the env's observations as the env gives them and does everything rlgear does
before acting (see :mod:`rlgear.export.signature` and ``docs/export.md``).
"""

from rlgear.export.checking import CheckReport, check, player, random_observations
from rlgear.export.exporting import Exported, export, policy_onnx
from rlgear.export.signature import FORMAT_BACKENDS, ObservationPlan, TensorSpec, observation_plan

__all__ = [
    "FORMAT_BACKENDS",
    "CheckReport",
    "Exported",
    "ObservationPlan",
    "TensorSpec",
    "check",
    "export",
    "observation_plan",
    "player",
    "policy_onnx",
    "random_observations",
]
