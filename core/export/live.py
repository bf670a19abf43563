"""The acting policy of a running trainer as ONNX, for external clients that act locally.

An env adapter never owns the policy; an env whose class sets ``VectorEnv.wants_policy_export``
(the external env, for clients that act on their own copy: docs/protocol.md section 10) gets a
:class:`LivePolicyExport` of the in-process rollout worker's policy from the worker set
(:mod:`rlgear.distributed.worker_set`). This module is the one place where a live policy is
exported; it calls :func:`rlgear.export.policy_onnx`.
"""

from __future__ import annotations

import copy
from typing import Any

from rlgear.export.exporting import policy_onnx


class LivePolicyExport:
    """``version()`` and ``export()`` of a rollout worker's (single) acting policy.

    Why a cache: an export takes 0.5 to 6 s and every connected client asks for the same policy;
    one export per weights version is made, when a client first asks for it, and only the latest
    is kept. The observation filter (``model.observation_filter``) goes into the graph as it is at
    export time, frozen (a copy: the worker's own keeps learning).
    """

    def __init__(self, worker: Any):
        self.worker = worker
        self._cached: tuple[int, bytes, dict[str, Any]] | None = None

    def version(self) -> int:
        return int(self.worker.policy.weights_version)

    def export(self) -> tuple[int, bytes, dict[str, Any]]:
        version = self.version()
        if self._cached is None or self._cached[0] != version:
            self._cached = (version, *policy_onnx(self._loaded(), explore=True))
        return self._cached

    def _loaded(self) -> Any:
        from rlgear.run.agent import LoadedPolicy

        worker = self.worker
        obs_filter = worker.obs_filter
        if obs_filter is not None:
            obs_filter = copy.deepcopy(obs_filter)
            obs_filter.frozen = True
        collector = worker._collector
        return LoadedPolicy(
            worker.policy, collector.config, preprocessor=collector.preprocessor, obs_filter=obs_filter
        )
