"""QMIX's episodic replay rows, framework-free: one whole team episode per replay-buffer row.

Why: the agents' GRUs are unrolled from each episode's start when learning (PyMARL's episode
buffer), so the replay unit is an episode, not a transition. Each episode the sampler hands over
(``workers.batch_mode: complete_episodes``, FIRST..LAST, ``[T + 1, 1]`` time-major rows) becomes
one row whose columns are padded in time to ``training.max_episode_len + 1`` steps, so the core
:class:`~rlgear.blocks.replay_buffers.ReplayBuffer` stores, samples and checkpoints them as it does
transitions (capacity and minibatch then count episodes).

Columns of a row (``L = max_episode_len + 1``; step ``t`` is the ``t``-th TimeStep of the episode):

============  ===========================  ===================================================
``ep_obs``    float32 ``[L, n + 1, W]``    team observation of step t (agent rows, state row)
``ep_actions`` int64 ``[L, n]``            the agents' actions at step t
``ep_action_mask`` bool ``[L, n, k]``      the actions allowed at step t (all where the env has no masks)
``ep_rewards`` float32 ``[L]``             reward of the transition t -> t + 1 (the team's sum)
``ep_discounts`` float32 ``[L]``           discount of step t + 1 (0 when the episode terminated there)
``ep_filled`` float32 ``[L]``              1 for the transitions t = 0 .. T - 1, 0 on padding
============  ===========================  ===================================================
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.sample_batch import SampleBatch
from rlgear.sampling.sequences import makes_own_sequences

OBS, ACTIONS, ACTION_MASK = "ep_obs", "ep_actions", "ep_action_mask"
REWARDS, DISCOUNTS, FILLED = "ep_rewards", "ep_discounts", "ep_filled"
#: What the loss reads, on both backends.
COLUMNS = (OBS, ACTIONS, ACTION_MASK, REWARDS, DISCOUNTS, FILLED)


class EpisodeTooLong(ValueError):
    """An episode longer than ``training.max_episode_len``."""


def episode_row(fragment: SampleBatch, max_episode_len: int, num_actions: int) -> SampleBatch:
    """One replay row from one whole team episode (``[T + 1, 1]`` time-major, FIRST..LAST)."""
    steps = int(fragment[SampleBatch.STEP_TYPES].shape[0])
    transitions = steps - 1
    if transitions > max_episode_len:
        raise EpisodeTooLong(
            f"a team episode lasted {transitions} env steps, more than training.max_episode_len "
            f"({max_episode_len}): raise it, or set workers.horizon to cut episodes"
        )
    length = max_episode_len + 1
    obs = np.asarray(fragment[SampleBatch.OBS])[:, 0]
    actions = np.asarray(fragment[SampleBatch.ACTIONS])[:, 0].astype(np.int64)
    n = actions.shape[-1]
    out = {
        OBS: np.zeros((length, *obs.shape[1:]), np.float32),
        ACTIONS: np.zeros((length, n), np.int64),
        ACTION_MASK: np.ones((length, n, num_actions), bool),
        REWARDS: np.zeros(length, np.float32),
        DISCOUNTS: np.zeros(length, np.float32),
        FILLED: np.zeros(length, np.float32),
    }
    out[OBS][:steps] = obs
    out[ACTIONS][:steps] = actions
    if SampleBatch.ACTION_MASK in fragment:
        out[ACTION_MASK][:steps] = np.asarray(fragment[SampleBatch.ACTION_MASK])[:, 0].reshape(steps, n, -1)
    out[REWARDS][:transitions] = np.asarray(fragment[SampleBatch.REWARDS])[1:, 0]
    out[DISCOUNTS][:transitions] = np.asarray(fragment[SampleBatch.DISCOUNTS])[1:, 0]
    out[FILLED][:transitions] = 1.0
    return SampleBatch({key: value[None] for key, value in out.items()})


@makes_own_sequences
def postprocess_episode(fragment: SampleBatch, policy: Any, config: Any) -> SampleBatch:
    """The sampler's postprocess function for qmix/vdn: a whole episode -> one replay row."""
    try:
        return episode_row(fragment, config.training.max_episode_len, int(policy.action_space.nvec[0]))
    except EpisodeTooLong as err:
        raise config.fail("training.max_episode_len", str(err)) from None


def trim(batch: SampleBatch) -> SampleBatch:
    """The columns cut after the longest episode of ``batch`` (its last observed step), so a
    learning step unrolls no GRU over padding that no episode of the minibatch has."""
    filled = np.asarray(batch[FILLED])
    steps = int(filled.sum(axis=1).max()) + 1 if len(filled) else 1
    return SampleBatch({key: np.asarray(batch[key])[:, :steps] for key in COLUMNS})
