"""TimeStep: what every environment adapter emits, with ALF's step-type semantics.

All fields are batched over envs (leading dimension ``num_envs``).

=============  =========================================================
``step_type``  FIRST (0) after a reset, MID (1), LAST (2) at an episode end
``reward``     reward for the *previous* action (0 at FIRST)
``discount``   0 at a LAST caused by a true terminal, 1 at a LAST caused
               by a time limit (truncation), 1 otherwise
``observation`` the observation (at LAST: the final observation)
``prev_action`` the action that led here (zeros at FIRST)
``env_id``     index of the env within the batch
=============  =========================================================

The step after a LAST is the FIRST of the next episode; the action chosen at
a LAST step is never trained on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np


@dataclass
class TakenActions:
    """Rows of a TimeStep whose action was already taken, reported by the env (off by default).

    Why: an external client may act on its own copy of the policy (ONNX, docs/protocol.md section
    10) and send its steps afterwards; the env replays them, and the sampler records the action the
    client took, and the log-probability the client's policy gave it, instead of its own. Only an
    env whose class sets ``VectorEnv.takes_actions`` emits this; every other env leaves
    ``TimeStep.taken`` None and sampling costs nothing more.
    """

    rows: np.ndarray  # bool [B]: True where the action was taken already
    actions: np.ndarray  # [B, *action_shape]: what the learner trains on (the unclipped sample)
    action_logp: np.ndarray  # float32 [B]: its log-probability under the policy that chose it


class StepType(IntEnum):
    FIRST = 0
    MID = 1
    LAST = 2


@dataclass
class TimeStep:
    step_type: np.ndarray  # int32 [B]
    reward: np.ndarray  # float32 [B]
    discount: np.ndarray  # float32 [B]
    observation: np.ndarray  # [B, *obs_shape]
    prev_action: np.ndarray  # [B, *action_shape]
    env_id: np.ndarray  # int32 [B]
    #: bool [B] or None (all valid). False marks a row that carries no env step: an
    #: external env's empty slot, or the step where its client dropped mid-episode.
    #: Such rows have step_type LAST; the evaluator never counts or trains on them and
    #: discards the episode that was running in that env (see ``rlgear.sampling.rollout_worker``).
    valid: np.ndarray | None = None
    #: The env's own per-step facts, or None: gymnasium's vector ``info`` (a dict of arrays over
    #: envs, with a boolean ``_key`` mask per key saying which envs set it). Never trained on; the
    #: evaluator hands the row of an episode's LAST step to hooks as ``episode.last_info``.
    info: dict[str, Any] | None = None
    #: bool ``[B, n]`` (Discrete actions) or ``[B, sum(nvec)]`` (MultiDiscrete), or None: the
    #: actions allowed at this step, from the ``action_mask`` key of a Dict observation. Set by
    #: the evaluator's preprocessing (``rlgear.preprocessing``), never by env adapters.
    action_mask: np.ndarray | None = None
    #: Rows whose action the env reports as already taken (:class:`TakenActions`), or None.
    taken: TakenActions | None = None

    @property
    def num_envs(self) -> int:
        return int(self.step_type.shape[0])

    def is_first(self) -> np.ndarray:
        return self.step_type == StepType.FIRST

    def is_mid(self) -> np.ndarray:
        return self.step_type == StepType.MID

    def is_last(self) -> np.ndarray:
        return self.step_type == StepType.LAST

    def is_terminated(self) -> np.ndarray:
        """LAST steps that ended in a true terminal state (nothing to bootstrap)."""
        return self.is_last() & (self.discount == 0)

    def is_truncated(self) -> np.ndarray:
        """LAST steps cut by a time limit (the return bootstraps from their value)."""
        return self.is_last() & (self.discount != 0)
