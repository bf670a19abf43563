"""The rows a client that acts locally has played, until it uploads them (docs/protocol.md section 10).

One row per observation, as a version 1 client would have sent it (``start`` or ``step``), with the
action the client then took; :meth:`ExperienceBuffer.frame` makes the ``experience`` message.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.external.wire import encode

START, STEP, TERMINATED, TRUNCATED = 0, 1, 2, 3


class ExperienceBuffer:
    """Rows of one policy version (an upload never mixes versions: the client uploads first)."""

    def __init__(self, obs_dtype: Any, action_dtype: Any, action_shape: tuple[int, ...]):
        self.obs_dtype = np.dtype(obs_dtype)
        self.action_dtype = np.dtype(action_dtype)
        self.action_shape = tuple(action_shape)
        self.clear()

    def clear(self) -> None:
        self.step_type: list[int] = []
        self.observation: list[np.ndarray] = []
        self.reward: list[float] = []
        self.action: list[Any] = []
        self.action_raw: list[np.ndarray] = []
        self.action_logp: list[float] = []
        self.has_raw = False

    def __len__(self) -> int:
        return len(self.step_type)

    def add(
        self,
        step_type: int,
        observation: np.ndarray,
        reward: float,
        action: Any = None,
        action_raw: np.ndarray | None = None,
        action_logp: float = 0.0,
    ) -> None:
        """One row; ``action`` None at an episode's end (nothing was acted on there)."""
        zero = np.zeros(self.action_shape, self.action_dtype)
        self.step_type.append(step_type)
        self.observation.append(np.asarray(observation, self.obs_dtype))
        self.reward.append(float(reward))
        self.action.append(zero if action is None else np.asarray(action, self.action_dtype))
        if action_raw is not None:
            self.has_raw = True
        self.action_raw.append(zero.astype(np.float32) if action_raw is None else action_raw)
        self.action_logp.append(float(action_logp))

    def frame(self, policy_version: int) -> bytes:
        arrays = {
            "step_type": np.asarray(self.step_type, np.uint8),
            "observation": np.stack(self.observation),
            "reward": np.asarray(self.reward, np.float32),
            "action": np.stack(self.action).astype(self.action_dtype, copy=False),
            "action_logp": np.asarray(self.action_logp, np.float32),
        }
        if self.has_raw:
            arrays["action_raw"] = np.stack(self.action_raw).astype(np.float32, copy=False)
        return encode("experience", {"policy_version": policy_version}, arrays)
