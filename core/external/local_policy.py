"""A policy server's policy run by the client itself (protocol 2, docs/protocol.md section 10).

The server sends its acting policy as ONNX with a sidecar naming the graph's inputs and outputs;
this module runs it with onnxruntime, imported only here, so that the Python client needs it only
in ``inference="client"`` mode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.errors import RLGearError

_ORT_DTYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(double)": np.float64}


def import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise RLGearError(
            "Client(inference='client') runs the server's policy with onnxruntime: pip install onnxruntime"
        ) from None
    return onnxruntime


class LocalPolicy:
    """One version of the server's policy: ``act(observation) -> (action, action_raw, action_logp)``.

    ``action`` is what the env takes (clipped to a bounded Box); ``action_raw`` the unclipped sample
    the learner trains on, where the graph has one (None otherwise).
    """

    def __init__(self, model: bytes, sidecar: dict[str, Any], version: int):
        ort = import_onnxruntime()
        if sidecar.get("recurrent"):
            raise RLGearError(
                "the server's policy is recurrent (model.lstm or model.attention); Client(inference='client') runs "
                "feed-forward policies only: use inference='server'"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one observation at a time: threads cost more than they give
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        self.version = version
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            names = ", ".join(i.name for i in inputs)
            raise RLGearError(
                f"the server's policy takes inputs {names}; this client feeds one observation only"
            )
        self.input_name = inputs[0].name
        self.input_dtype = _ORT_DTYPES.get(inputs[0].type, np.float32)
        self.outputs = [o.name for o in self.session.get_outputs()]
        missing = {"action", "action_logp"} - set(self.outputs)
        if missing:
            raise RLGearError(f"the server's policy has no output {', '.join(sorted(missing))}")
        self._raw = "action_raw" in self.outputs

    def act(self, observation: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, float]:
        batch = np.asarray(observation, dtype=self.input_dtype)[None]
        wanted = ["action", "action_logp", *(["action_raw"] if self._raw else [])]
        values = self.session.run(wanted, {self.input_name: batch})
        raw = np.asarray(values[2][0], np.float32) if self._raw else None
        return np.asarray(values[0][0]), raw, float(values[1][0])
