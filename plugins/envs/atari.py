"""``env.preset: atari``: the Atari protocol of Machado et al. 2018 in one line, for the gymnasium and envpool adapters.

What the preset gives (the same through both adapters; docs/atari-mujoco.md has the table):

- ALE v5 sticky actions: the previous action repeats with probability 0.25 at every emulator frame
  (``repeat_action_probability=0.25``, gymnasium's v5 default), the minimal action set
  (``full_action_space=False``);
- frame skip 4 done by the wrapper, the observation the max over the last two frames (so the
  emulator is made with ``frameskip=1``; Mnih et al. 2015 max-pool against Atari's flicker);
- 84x84 grayscale (OpenCV INTER_AREA resize), a stack of the last 4 frames, uint8, channels
  last ``[84, 84, 4]`` (the layout of rlgear's conv trunk, which picks the Nature-DQN filters
  for it);
- up to 30 no-op actions at the start of each episode (``noop_max=30``). Machado et al. argue
  that with sticky actions no-op starts are not needed (sticky actions already make the
  emulator stochastic); they are kept because SB3's AtariWrapper, CleanRL's ``ppo_atari`` and
  envpool all use them, so the benchmarks compare like with like. ``env.kwargs: {noop_max: 0}``
  gives Machado et al.'s protocol exactly;
- a life lost does not end the episode (``terminal_on_life_loss`` / ``episodic_life`` off:
  Machado et al.'s recommendation); no fire press at reset;
- rewards are NOT clipped here: set ``training.clip_rewards: true`` (the learner clips, so
  the run still reports the game's score).

Through the gymnasium adapter the preset is gymnasium's own wrappers
(:class:`gymnasium.wrappers.AtariPreprocessing`, :class:`gymnasium.wrappers.FrameStackObservation`)
plus :class:`ChannelsLast`; ``env.kwargs`` may override any of their arguments by name, and the
rest go to ``gym.make``. Through envpool it is envpool's own Atari options (the same names as
envpool's config), and the pool's channels-first stack is turned channels last.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlgear.errors import ConfigError

#: The presets the adapters know (``env.preset``).
PRESETS = ("atari",)

#: ``gym.make`` arguments of the gymnasium preset (the emulator steps one frame; the wrapper skips).
GYMNASIUM_MAKE_KWARGS: dict[str, Any] = {
    "frameskip": 1,
    "repeat_action_probability": 0.25,
    "full_action_space": False,
}
#: :class:`gymnasium.wrappers.AtariPreprocessing` arguments of the gymnasium preset.
PREPROCESSING_KWARGS: dict[str, Any] = {
    "noop_max": 30,
    "frame_skip": 4,
    "screen_size": 84,
    "terminal_on_life_loss": False,
    "grayscale_obs": True,
    "scale_obs": False,
}
#: :class:`gymnasium.wrappers.FrameStackObservation` arguments of the gymnasium preset.
FRAME_STACK_KWARGS: dict[str, Any] = {"stack_size": 4}

#: envpool's Atari options of the preset (envpool's names; ``noop_max`` and ``frame_skip`` are
#: AtariPreprocessing's too, ``stack_num`` is ``stack_size``, ``img_height``/``img_width`` are
#: ``screen_size``, ``episodic_life`` is ``terminal_on_life_loss``).
ENVPOOL_KWARGS: dict[str, Any] = {
    "repeat_action_probability": 0.25,
    "full_action_space": False,
    "frame_skip": 4,
    "noop_max": 30,
    "img_height": 84,
    "img_width": 84,
    "gray_scale": True,
    "stack_num": 4,
    "episodic_life": False,
    "zero_discount_on_life_loss": False,
    "reward_clip": False,  # the learner clips (training.clip_rewards)
    "use_fire_reset": False,  # gymnasium's ALE presses no FIRE at reset either
}


class ChannelsLast(gym.ObservationWrapper):
    """``[C, H, W]`` observations (FrameStackObservation's stack of 2-D frames) as ``[H, W, C]``.

    Why: rlgear's conv trunk reads images channels last (rlgear.config.conv); a
    transpose of one 84x84x4 uint8 stack is a copy of 28 kB, microseconds beside the
    emulator's four frames and the network's forward pass.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 3):
            raise ValueError(f"ChannelsLast needs a rank-3 Box observation space [C, H, W], got {space}")
        self.observation_space = gym.spaces.Box(
            np.moveaxis(space.low, 0, -1), np.moveaxis(space.high, 0, -1), dtype=space.dtype
        )

    def observation(self, observation: Any) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(np.asarray(observation), 0, -1))


def check_preset(preset: str | None, adapter: str) -> None:
    """A ConfigError for a preset name the adapters do not know."""
    if preset is not None and preset not in PRESETS:
        raise ConfigError(
            f"env.preset: unknown preset '{preset}' for the {adapter} adapter (known: {', '.join(PRESETS)})"
        )


def gymnasium_preset(
    preset: str, kwargs: dict[str, Any]
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """``(gym.make kwargs, per-env wrapper specs)`` of ``preset``, ``env.kwargs`` overriding by name.

    A key of ``kwargs`` that AtariPreprocessing or FrameStackObservation takes goes to it;
    the others go to ``gym.make`` (over the preset's ``frameskip``, ``repeat_action_probability``,
    ``full_action_space``).
    """
    check_preset(preset, "gymnasium")
    make_kwargs = dict(GYMNASIUM_MAKE_KWARGS)
    preprocessing = dict(PREPROCESSING_KWARGS)
    stack = dict(FRAME_STACK_KWARGS)
    for key, value in kwargs.items():
        if key in preprocessing:
            preprocessing[key] = value
        elif key in stack:
            stack[key] = value
        else:
            make_kwargs[key] = value
    wrappers = [
        ("gymnasium.wrappers.AtariPreprocessing", preprocessing),
        ("gymnasium.wrappers.FrameStackObservation", stack),
        ("rlgear.plugins.envs.atari:ChannelsLast", {}),
    ]
    return make_kwargs, wrappers


def envpool_preset(preset: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """envpool's options of ``preset``, ``env.kwargs`` overriding them."""
    check_preset(preset, "envpool")
    return {**ENVPOOL_KWARGS, **kwargs}
