"""The policy versions clients that act locally see, and the ``policy`` frames the server sends them.

Why a counter of its own and not the learner's ``weights_version``: that one moves at every SGD
step (hundreds per PPO iteration), so a lag limit in its units would depend on minibatch
settings. ``policy_version`` here moves by one each time the server sees the acting policy's
weights changed, which for synchronous algorithms is once per training iteration
(docs/protocol.md section 10).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rlgear.env import PolicyExport
from rlgear.external.wire import ErrorCode, WireError, encode


class PolicyVersions:
    """Counts the acting policy's versions and caches the latest export as a frame."""

    def __init__(self, export: PolicyExport):
        self.export = export
        self._weights = export.version()
        self.version = 0
        self._frame: tuple[int, bytes] | None = None
        self.export_seconds = 0.0  # of the last export (the server forgives that pause)

    def current(self) -> int:
        """The version now (bumped when the weights changed since the last look)."""
        self._see(self.export.version())
        return self.version

    def _see(self, weights: int) -> None:
        if weights != self._weights:
            self._weights = weights
            self.version += 1

    def frame(self) -> tuple[int, bytes]:
        """``(version, policy frame)``: the model exported now if its version has no frame yet."""
        self.current()
        if self._frame is not None and self._frame[0] == self.version:
            return self._frame
        started = time.monotonic()
        try:
            weights, model, sidecar = self.export.export()
        except Exception as err:  # an exporter error is the server's limit, never a crash
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise WireError(
                ErrorCode.NO_POLICY, f"the policy cannot be exported as ONNX: {first[:300]}"
            ) from None
        finally:
            self.export_seconds = time.monotonic() - started
        self._see(weights)
        fields: dict[str, Any] = {"policy_version": self.version, "format": "onnx", "sidecar": sidecar}
        self._frame = (
            self.version,
            encode("policy", fields, {"model": np.frombuffer(model, dtype=np.uint8)}),
        )
        return self._frame
