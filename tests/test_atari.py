"""``env.preset: atari`` (Machado et al. 2018's protocol) through the gymnasium and envpool adapters.

What the preset promises, checked on the emulator itself: 84x84x4 uint8 stacks, channels last (the
Nature-DQN trunk is chosen for them); four emulator frames per agent step, the observation the max of
the last two; sticky actions at 0.25 and the minimal action set; a lost life does not end the episode;
the same layout through envpool, whose Atari options the preset maps.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("ale_py", reason="needs ale-py: pip install 'rlgear[atari]'")
pytest.importorskip("cv2", reason="needs OpenCV: pip install 'rlgear[atari]'")

import cv2

from rlgear.config.conv import NATURE_FILTERS, conv_layers
from rlgear.errors import ConfigError
from rlgear.plugins.envs import atari
from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter, _make_env
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType


def _wrapper(env, cls_name):
    while env is not None:
        if type(env).__name__ == cls_name:
            return env
        env = getattr(env, "env", None)
    raise AssertionError(f"no {cls_name} in the wrapper chain")


def test_gymnasium_preset_gives_84x84x4_uint8_channels_last_and_the_nature_trunk():
    env = GymnasiumAdapter().make("ALE/Pong-v5", 2, kwargs={}, preset="atari")
    try:
        space = env.observation_space
        assert isinstance(space, Box) and space.shape == (84, 84, 4) and space.dtype == np.uint8
        assert env.action_space == Discrete(6)  # Pong's minimal action set (full_action_space off)
        ts = env.reset(seed=0)
        assert ts.observation.shape == (2, 84, 84, 4) and ts.observation.dtype == np.uint8
        spec = conv_layers(space, SimpleNamespace(conv_filters=None))
        assert [[layer.out_channels, layer.kernel, layer.stride] for layer in spec.layers] == NATURE_FILTERS
        assert spec.layers[0].in_channels == 4 and spec.output_shape == (7, 7, 64)
        assert spec.scale == pytest.approx(1 / 255)
    finally:
        env.close()


def test_gymnasium_preset_skips_four_frames_and_max_pools_the_last_two():
    env = _make_env("ALE/Pong-v5", {}, None, (), "atari")
    try:
        ale = env.unwrapped.ale
        env.reset(seed=1)
        assert env.unwrapped._frameskip == 1  # the emulator steps single frames; the wrapper skips
        preprocessing = _wrapper(env, "AtariPreprocessing")
        rng = np.random.default_rng(0)
        pools_differ = False
        for k in range(1, 41):
            before = ale.getEpisodeFrameNumber()
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(6)))
            assert not (terminated or truncated)
            assert ale.getEpisodeFrameNumber() - before == 4, f"step {k}"
            # the newest frame of the stack is the max of the last two emulator frames, resized
            # (AtariPreprocessing pools in place: buffer 0 holds the max, buffer 1 the frame before last)
            pooled, previous = preprocessing.obs_buffer
            np.testing.assert_array_equal(pooled, np.maximum(ale.getScreenGrayscale(), previous))
            resized = cv2.resize(pooled, (84, 84), interpolation=cv2.INTER_AREA)
            np.testing.assert_array_equal(obs[..., -1], resized)
            pools_differ = pools_differ or bool((pooled != ale.getScreenGrayscale()).any())
        assert pools_differ, "the frame before last never mattered: no max-pooling seen"
    finally:
        env.close()


def test_gymnasium_preset_has_sticky_actions_and_env_kwargs_override_by_name():
    env = _make_env("ALE/Pong-v5", {}, None, (), "atari")
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert _wrapper(env, "AtariPreprocessing").noop_max == 30
    env.close()
    env = _make_env(
        "ALE/Pong-v5", {"noop_max": 0, "repeat_action_probability": 0.0, "stack_size": 2}, None, (), "atari"
    )
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    assert _wrapper(env, "AtariPreprocessing").noop_max == 0
    assert env.observation_space.shape == (84, 84, 2)
    env.close()


def test_gymnasium_preset_does_not_end_the_episode_at_a_lost_life():
    env = _make_env("ALE/Breakout-v5", {}, None, (), "atari")
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        lives = env.unwrapped.ale.lives()
        assert lives == 5
        for _ in range(5000):
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            if info["lives"] < lives:
                break
            assert not terminated
        else:
            pytest.fail("no life lost in 5000 random steps")
        assert not terminated and not truncated and info["lives"] == 4
    finally:
        env.close()


def test_stacks_shift_towards_the_front_newest_frame_last():
    """The same layout through both adapters: frame i of step t+1 is frame i+1 of step t."""
    adapters = [(GymnasiumAdapter(), "ALE/Pong-v5")]
    if _has_envpool():
        from rlgear.plugins.envs.envpool_env import EnvPoolAdapter

        adapters.append((EnvPoolAdapter(), "Pong-v5"))
    for adapter, name in adapters:
        env = adapter.make(name, 2, kwargs={}, preset="atari")
        try:
            ts = env.reset(seed=0)
            for _ in range(30):
                previous = ts.observation
                ts = env.step(np.zeros(2, dtype=np.int64))
                if (ts.step_type == StepType.MID).all():
                    np.testing.assert_array_equal(ts.observation[..., :3], previous[..., 1:], err_msg=name)
        finally:
            env.close()


def test_unknown_preset_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown preset 'atary'"):
        GymnasiumAdapter().make("ALE/Pong-v5", 1, kwargs={}, preset="atary")


def _has_envpool() -> bool:
    try:
        from rlgear.plugins.envs.envpool_env import import_envpool

        import_envpool()
    except Exception:
        return False
    return True


def test_envpool_preset_maps_the_protocol_to_envpool_options_and_channels_last():
    pytest.importorskip("envpool", reason="needs envpool: pip install 'rlgear[envpool]'")
    from rlgear.plugins.envs.envpool_env import EnvPoolAdapter

    with pytest.raises(ConfigError, match="noop_max: 0 crashes envpool"):  # a segfault, without the check
        EnvPoolAdapter().make("Pong-v5", 2, kwargs={"noop_max": 0}, preset="atari")
    env = EnvPoolAdapter().make("Pong-v5", 2, kwargs={"noop_max": 1}, preset="atari")
    pool_config = env.env.unwrapped.pool.config  # GymnasiumVectorEnv.env: the pool (maybe wrapped)
    try:
        expected = {**atari.ENVPOOL_KWARGS, "noop_max": 1}
        for key, value in expected.items():
            assert pool_config[key] == pytest.approx(value), key
        space = env.observation_space
        assert isinstance(space, Box) and space.shape == (84, 84, 4) and space.dtype == np.uint8
        assert env.action_space == Discrete(6)
        ts = env.reset(seed=0)
        assert ts.observation.shape == (2, 84, 84, 4) and ts.observation.flags.c_contiguous
        spec = conv_layers(space, SimpleNamespace(conv_filters=None))
        assert [[layer.out_channels, layer.kernel, layer.stride] for layer in spec.layers] == NATURE_FILTERS
    finally:
        env.close()


def test_the_atari_configs_use_the_preset_and_clip_rewards_in_the_learner():
    from pathlib import Path

    from rlgear.config.loading import load

    configs = sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.yaml"))
    atari_configs = [load(p) for p in configs if "ALE/" in p.read_text()]
    assert len(atari_configs) >= 6
    for config in atari_configs:
        assert config.env.preset == "atari" and config.training.clip_rewards is True, config.source
