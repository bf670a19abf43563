"""Small gymnasium envs with structured spaces, for the masking and composite-action tests.

``MaskedChoiceEnv``: a Dict observation ``{"action_mask", "cue", "noise"}``. Each step a
new random set of 2 or 3 of the 4 actions is allowed. With cue 0 the reward is 1 for the
lowest allowed action, with cue 1 for the highest; other allowed actions give 0 and a
disallowed one gives -1 and is counted in ``violations`` (class-wide, so a test can read
it whatever process layout the vector env has: the tests use ``vectorization: sync``).
The mask is not model input, so a policy can only solve this through the masking of its
logits (or Q-values): it learns an order of the actions per cue, and the masked argmax
takes the best allowed one. Episodes last 20 steps (return 20 at best; a uniformly random
allowed action gets about 8.3 on average).

``JointTargetEnv``: MultiDiscrete([3, 3]) actions; the observation (Discrete(9)) codes a
target pair ``(obs // 3, obs % 3)`` and the reward is 1 only when both sub-actions match
it. Episodes last 10 steps (return 10 at best; random play gets 10/9).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

NUM_ACTIONS = 4


class MaskedChoiceEnv(gym.Env):
    observation_space = gym.spaces.Dict(
        {
            "action_mask": gym.spaces.MultiBinary(NUM_ACTIONS),
            "cue": gym.spaces.Discrete(2),
            "noise": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        }
    )
    action_space = gym.spaces.Discrete(NUM_ACTIONS)
    #: Disallowed actions received, over every instance in this process.
    violations = 0
    #: Actions received, over every instance in this process.
    actions_taken = 0

    def __init__(self, episode_length: int = 20, empty_mask_at: int | None = None):
        self.episode_length = episode_length
        #: A step (within the episode) whose mask allows nothing: an env bug the evaluator must name.
        self.empty_mask_at = empty_mask_at
        self.t = 0

    def _observe(self) -> dict[str, np.ndarray]:
        allowed = self.np_random.choice(NUM_ACTIONS, size=int(self.np_random.integers(2, 4)), replace=False)
        self.mask = np.zeros(NUM_ACTIONS, np.int8)
        if self.t != self.empty_mask_at:
            self.mask[allowed] = 1
        self.cue = int(self.np_random.integers(2))
        noise = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        return {"action_mask": self.mask.copy(), "cue": self.cue, "noise": noise}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        action = int(action)
        type(self).actions_taken += 1
        allowed = np.flatnonzero(self.mask)
        if not self.mask[action]:
            type(self).violations += 1
            reward = -1.0
        else:
            best = allowed[0] if self.cue == 0 else allowed[-1]
            reward = float(action == best)
        self.t += 1
        return self._observe(), reward, False, self.t >= self.episode_length, {}


class JointTargetEnv(gym.Env):
    observation_space = gym.spaces.Discrete(9)
    action_space = gym.spaces.MultiDiscrete([3, 3])

    def __init__(self, episode_length: int = 10):
        self.episode_length = episode_length
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.code = int(self.np_random.integers(9))
        return self.code, {}

    def step(self, action):
        action = np.asarray(action)
        assert action.shape == (2,), action  # gymnasium's MultiDiscrete layout reaches the env
        reward = float(action[0] == self.code // 3 and action[1] == self.code % 3)
        self.t += 1
        self.code = int(self.np_random.integers(9))
        return self.code, reward, False, self.t >= self.episode_length, {}


class TupleActionEnv(gym.Env):
    """Tuple(Discrete(3), Box(1)) actions: reward ``1 - |box - 0.5|`` when the discrete part equals
    the observed cue (Discrete(3)), else 0; checks the structure the env receives."""

    observation_space = gym.spaces.Discrete(3)
    action_space = gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (1,), np.float32)])

    def __init__(self, episode_length: int = 5):
        self.episode_length = episode_length

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.cue = int(self.np_random.integers(3))
        return self.cue, {}

    def step(self, action):
        choice, amount = action
        assert np.ndim(choice) == 0 and np.shape(amount) == (1,), action
        assert -1.0 <= float(amount[0]) <= 1.0  # clipped to the Box part's bounds
        reward = 1.0 - abs(float(amount[0]) - 0.5) if int(choice) == self.cue else 0.0
        self.t += 1
        self.cue = int(self.np_random.integers(3))
        return self.cue, reward, False, self.t >= self.episode_length, {}


class DictActionEnv(TupleActionEnv):
    """TupleActionEnv's task with Dict({"choice": Discrete(3), "amount": Box(1)}) actions."""

    action_space = gym.spaces.Dict(
        {"choice": gym.spaces.Discrete(3), "amount": gym.spaces.Box(-1.0, 1.0, (1,), np.float32)}
    )

    def step(self, action):
        assert set(action) == {"choice", "amount"}, action
        return super().step((action["choice"], action["amount"]))


class TupleObsEnv(gym.Env):
    """A Tuple observation ``(cue: Discrete(3), noise: Box(2), pair: MultiDiscrete([2, 3]), bits:
    MultiBinary(2))``: reward 1 when the action (Discrete(3)) equals the cue. For the export tests:
    every kind of observation leaf, nested by index."""

    observation_space = gym.spaces.Tuple(
        [
            gym.spaces.Discrete(3),
            gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            gym.spaces.MultiDiscrete([2, 3]),
            gym.spaces.MultiBinary(2),
        ]
    )
    action_space = gym.spaces.Discrete(3)

    def __init__(self, episode_length: int = 5):
        self.episode_length = episode_length

    def _observe(self):
        self.obs = self.observation_space.sample()
        return self.obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        reward = float(int(action) == int(self.obs[0]))
        self.t += 1
        return self._observe(), reward, False, self.t >= self.episode_length, {}


class MaskedJointEnv(JointTargetEnv):
    """JointTargetEnv's task with a Dict observation ``{"action_mask": MultiBinary(6), "target":
    Discrete(9)}``: each sub-action has 2 or 3 of its 3 choices allowed per step (the mask of a
    MultiDiscrete is the parts' masks side by side)."""

    observation_space = gym.spaces.Dict(
        {"action_mask": gym.spaces.MultiBinary(6), "target": gym.spaces.Discrete(9)}
    )

    def _observe(self) -> dict:
        mask = np.zeros(6, np.int8)
        for block in range(2):
            allowed = self.np_random.choice(3, size=int(self.np_random.integers(2, 4)), replace=False)
            mask[3 * block + allowed] = 1
        return {"action_mask": mask, "target": self.code}

    def reset(self, *, seed=None, options=None):
        _, info = super().reset(seed=seed)
        return self._observe(), info

    def step(self, action):
        _, reward, terminated, truncated, info = super().step(action)
        return self._observe(), reward, terminated, truncated, info
