"""An ``experience`` upload (protocol version 2) checked row by row into what the server replays.

A client that acts locally sends the steps it played in batches (docs/protocol.md section 10).
Each row is what a version 1 client would have sent as a ``start`` or ``step`` message, plus the
action it then took and that action's log-probability under the policy it acted with. Nothing
here trusts the client: shapes, dtypes, values and the order of episode rows are checked before
any row is queued, so a malformed batch costs its sender its connection and nobody else anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlgear.external.wire import FLOAT32_MAX, ErrorCode, Message, WireError
from rlgear.spaces import Box, Discrete

from .checks import ObservationCheck, magnitude_limit
from .settings import DEFAULT_MAX_ABS_VALUE, ServerSettings

#: ``step_type`` values of an upload's rows.
START, STEP, TERMINATED, TRUNCATED = 0, 1, 2, 3
_ARRAYS = ("step_type", "observation", "reward", "action", "action_logp")


@dataclass
class Upload:
    """The checked rows of one upload (``[N, ...]`` each)."""

    policy_version: int
    step_type: np.ndarray  # uint8: START, STEP, TERMINATED, TRUNCATED
    observation: np.ndarray
    reward: np.ndarray  # float32 (0 at START rows)
    action: np.ndarray  # as the env took it (int64 for Discrete); not checked at episode ends
    trained: np.ndarray  # what the learner trains on: action_raw where sent, else action
    action_logp: np.ndarray  # float32

    def __len__(self) -> int:
        return len(self.step_type)


class UploadCheck:
    """Checks ``experience`` messages against the server's spaces and limits."""

    def __init__(self, settings: ServerSettings, observations: ObservationCheck):
        self.settings = settings
        self.observations = observations
        space = settings.action_space
        self.action_space = space
        self.action_shape = tuple(space.shape)
        self.action_dtype = np.dtype(np.int64) if isinstance(space, Discrete) else np.dtype(space.dtype)
        if isinstance(space, Box):
            low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
            self.low, self.high = low, high
            finite = np.abs(np.concatenate([low.ravel(), high.ravel()]))
            finite = finite[np.isfinite(finite)]
            # an unclipped sample lies near the mean: finite, and never where float32 squares overflow
            self.raw_limit = max(DEFAULT_MAX_ABS_VALUE, float(finite.max()) if finite.size else 0.0)
        self.action_limit = magnitude_limit(DEFAULT_MAX_ABS_VALUE, self.action_dtype)

    def __call__(self, msg: Message, in_episode: bool) -> Upload:
        """The upload's rows, or a WireError; ``in_episode``: the client's episode was running before it."""
        version = msg.header.get("policy_version")
        if type(version) is not int or version < 0:
            raise WireError(
                ErrorCode.BAD_MESSAGE, f"'policy_version' must be a non-negative integer, got {version!r}"
            )
        arrays = msg.arrays
        unknown = sorted(set(arrays) - {*_ARRAYS, "action_raw"})
        missing = [name for name in _ARRAYS if name not in arrays]
        if unknown or missing:
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"'experience' carries arrays {', '.join(_ARRAYS)} (and action_raw for a Box action space): "
                + (f"missing {', '.join(missing)}" if missing else f"unexpected {', '.join(unknown)}"),
            )
        kinds = arrays["step_type"]
        if kinds.dtype != np.uint8 or kinds.ndim != 1:
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"step_type must be uint8 of shape [N], got {kinds.dtype} of shape {list(kinds.shape)}",
            )
        n = len(kinds)
        if not 1 <= n <= self.settings.max_upload_steps:
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"an upload holds 1..{self.settings.max_upload_steps} rows (env.kwargs.max_upload_steps), got {n}",
            )
        if (kinds > TRUNCATED).any():
            raise WireError(
                ErrorCode.BAD_ARRAY, f"step_type{list(_first(kinds > TRUNCATED))} must be 0, 1, 2 or 3"
            )
        self._check_order(kinds, in_episode)
        self.observations(arrays["observation"], n)
        reward = self._float_rows(arrays, "reward", (n,))
        if (reward[kinds == START] != 0).any():
            raise WireError(ErrorCode.BAD_ARRAY, "reward must be 0 at start rows (step_type 0)")
        limit = self.settings.max_abs_reward
        if limit is not None and (np.abs(reward) > limit).any():
            index = _first(np.abs(reward) > limit)
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"reward{list(index)} = {float(reward[index]):g} is beyond the server's env.kwargs.max_abs_reward = {limit:g}",
            )
        acting = kinds <= STEP  # rows where the client acted: their action is trained on
        logp = self._float_rows(arrays, "action_logp", (n,))
        self._check_logp(logp, acting)
        action = self._check_action(arrays["action"], n, acting)
        trained = action
        if "action_raw" in arrays:
            trained = self._check_raw(arrays["action_raw"], action, n, acting)
        return Upload(version, kinds, arrays["observation"], reward, action, trained, logp)

    @staticmethod
    def _check_order(kinds: np.ndarray, in_episode: bool) -> None:
        """start only outside an episode, every other row inside one (docs/protocol.md section 5)."""
        for i, kind in enumerate(kinds.tolist()):
            if kind == START and in_episode:
                raise WireError(ErrorCode.OUT_OF_ORDER, f"step_type[{i}] is a start (0) during an episode")
            if kind != START and not in_episode:
                raise WireError(
                    ErrorCode.OUT_OF_ORDER,
                    f"step_type[{i}] = {kind} outside an episode (start it with step_type 0)",
                )
            in_episode = kind <= STEP

    @staticmethod
    def _float_rows(arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
        value = arrays[name]
        if value.dtype != np.float32 or value.shape != shape:
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"{name} must be float32 of shape {list(shape)}, got {value.dtype} of shape {list(value.shape)}",
            )
        if not np.isfinite(value).all():
            raise WireError(
                ErrorCode.NON_FINITE, f"{name}{list(_first(~np.isfinite(value)))} is NaN or infinite"
            )
        return value

    def _check_logp(self, logp: np.ndarray, acting: np.ndarray) -> None:
        limit = self.settings.max_abs_logp
        if limit is not None and (np.abs(logp[acting]) > limit).any():
            index = _first(acting & (np.abs(logp) > limit))
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"action_logp{list(index)} = {float(logp[index]):g} is beyond the server's "
                f"env.kwargs.max_abs_logp = {limit:g}",
            )
        if isinstance(self.action_space, Discrete) and (logp[acting] > 1e-3).any():
            index = _first(acting & (logp > 1e-3))
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"action_logp{list(index)} = {float(logp[index]):g} must be <= 0 (a log-probability of a Discrete action)",
            )

    def _check_action(self, action: np.ndarray, n: int, acting: np.ndarray) -> np.ndarray:
        shape = (n, *self.action_shape)
        if action.dtype != self.action_dtype or action.shape != shape:
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"action must be {self.action_dtype} of shape {list(shape)}, got {action.dtype} of shape {list(action.shape)}",
            )
        taken = action[acting]
        if isinstance(self.action_space, Discrete):
            outside = (taken < 0) | (taken >= self.action_space.n)
            if outside.any():
                index = _first(acting & ((action < 0) | (action >= self.action_space.n)))
                raise WireError(
                    ErrorCode.BAD_ARRAY,
                    f"action{list(index)} = {int(action[index])} is outside 0..{self.action_space.n - 1}",
                )
            return action
        if self.action_dtype.kind == "f" and not np.isfinite(taken).all():
            raise WireError(ErrorCode.NON_FINITE, "action holds NaN or infinity")
        outside = (action < self.low) | (action > self.high)
        outside &= acting.reshape((n,) + (1,) * len(self.action_shape))
        if outside.any():
            index = _first(outside)
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"action{list(index)} = {float(action[index]):g} is outside the action space "
                f"[{float(self.low[index[1:]]):g}, {float(self.high[index[1:]]):g}]",
            )
        if self.action_limit is not None and (np.abs(taken) > self.action_limit).any():
            raise WireError(
                ErrorCode.BAD_ARRAY, f"action has values beyond {self.action_limit:g} in magnitude"
            )
        return action

    def _check_raw(self, raw: np.ndarray, action: np.ndarray, n: int, acting: np.ndarray) -> np.ndarray:
        if not isinstance(self.action_space, Box):
            raise WireError(ErrorCode.BAD_ARRAY, "action_raw is only for a Box action space")
        shape = (n, *self.action_shape)
        if raw.dtype != np.float32 or raw.shape != shape:
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"action_raw must be float32 of shape {list(shape)}, got {raw.dtype} of shape {list(raw.shape)}",
            )
        taken = raw[acting]
        if not np.isfinite(taken).all() or (np.abs(taken) > FLOAT32_MAX).any():
            raise WireError(ErrorCode.NON_FINITE, "action_raw holds NaN or infinity")
        if (np.abs(taken) > self.raw_limit).any():
            raise WireError(
                ErrorCode.BAD_ARRAY,
                f"action_raw has values beyond {self.raw_limit:g} in magnitude (a policy's sample is not this far out)",
            )
        clipped = np.clip(taken, self.low, self.high).astype(np.float64)
        if not np.allclose(clipped, action[acting].astype(np.float64), rtol=1e-5, atol=1e-6):
            raise WireError(
                ErrorCode.BAD_ARRAY, "action must be action_raw clipped to the action space's low/high"
            )
        return raw


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])
