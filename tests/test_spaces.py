"""Structured spaces, their JSON form, flat actions, and the observation preprocessor."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlgear.config.conv import ImageVectorBox
from rlgear.errors import ConfigError, EnvDataError
from rlgear.plugins.envs.gymnasium_env import convert_space
from rlgear.preprocessing import ObservationPreprocessor
from rlgear.spaces import (
    Box,
    Dict,
    Discrete,
    MultiBinary,
    MultiDiscrete,
    Tuple,
    clip_action,
    flat_action_dim,
    flat_dim,
    flatten_action,
    space_from_json,
    unflatten_action,
)
from rlgear.timestep import StepType


def box(*shape, low=-1.0, high=1.0, dtype=np.float32):
    return Box(np.full(shape, low), np.full(shape, high), np.dtype(dtype))


NESTED = Dict(
    {
        "pos": box(2),
        "kind": Discrete(3),
        "inner": Tuple([MultiDiscrete([2, 3]), MultiBinary(3)]),
        "image": box(2, 2, 1, low=0, high=255, dtype=np.uint8),
    }
)


@pytest.mark.parametrize(
    "space",
    [
        Discrete(4),
        box(3),
        Box(np.array([-np.inf, 0.0]), np.array([np.inf, 1.0])),
        MultiDiscrete([2, 5, 3]),
        MultiBinary(4),
        MultiBinary([2, 3]),
        Tuple([Discrete(2), box(2)]),
        NESTED,
    ],
)
def test_spaces_round_trip_through_json_and_hash_alike(space):
    import json

    again = space_from_json(json.loads(json.dumps(space.to_json())))
    assert again == space and hash(again) == hash(space)
    assert again.to_json() == space.to_json()


def test_spaces_compare_by_content():
    assert MultiDiscrete([2, 3]) != MultiDiscrete([3, 2])
    assert MultiBinary(3) == MultiBinary([3]) and MultiBinary(3) != MultiBinary([1, 3])
    assert Dict({"b": Discrete(2), "a": Discrete(3)}) == Dict({"a": Discrete(3), "b": Discrete(2)})
    assert Dict({"a": Discrete(2)}) != Dict({"a": Discrete(3)})
    assert Tuple([Discrete(2), Discrete(3)]) != Tuple([Discrete(3), Discrete(2)])


def test_dict_keeps_its_keys_sorted_like_gymnasium():
    assert NESTED.keys() == ["image", "inner", "kind", "pos"]
    assert list(NESTED) == NESTED.keys()


def test_bad_spaces_are_refused():
    with pytest.raises(ValueError, match="nvec"):
        MultiDiscrete([2, 0])
    with pytest.raises(ValueError, match="MultiBinary"):
        MultiBinary(0)


def test_flat_dims_count_one_hots_and_elements():
    assert flat_dim(MultiDiscrete([2, 3])) == 5
    assert flat_dim(MultiBinary([2, 3])) == 6
    # image 4 + inner (2 + 3 + 3) + kind 3 + pos 2
    assert flat_dim(NESTED) == 17


def test_preprocessor_flattens_a_nested_dict_in_sorted_key_order():
    prep = ObservationPreprocessor(NESTED, Discrete(2))
    # The image heads the row (it is first in key order anyway) and the space says where it ends
    # (tests/test_dict_image_layout.py covers an image that is not first).
    assert isinstance(prep.observation_space, ImageVectorBox)
    assert prep.observation_space.shape == (17,) and prep.observation_space.image == NESTED["image"]
    observations = {
        "pos": np.array([[0.5, -0.25], [1.0, 0.0]], np.float32),
        "kind": np.array([2, 0]),
        "inner": (np.array([[1, 0], [0, 2]]), np.array([[1, 0, 1], [0, 0, 0]], np.int8)),
        "image": np.array([[[[1], [2]], [[3], [4]]], [[[0], [0]], [[0], [9]]]], np.uint8),
    }
    expected = np.array(
        [
            # image (4)      | inner: multidiscrete one-hots (2 + 3) | multibinary (3) | kind (3) | pos (2)
            [1, 2, 3, 4, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0.5, -0.25],
            [0, 0, 0, 9, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1.0, 0.0],
        ],
        np.float32,
    )
    out = prep.transform(observations)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, expected)
    assert prep.action_mask(observations) is None


def test_preprocessor_flattens_a_tuple_and_top_level_multi_spaces():
    prep = ObservationPreprocessor(Tuple([Discrete(2), box(1)]))
    np.testing.assert_array_equal(
        prep.transform((np.array([1, 0]), np.array([[0.5], [-1.0]], np.float32))),
        [[0, 1, 0.5], [1, 0, -1.0]],
    )
    prep = ObservationPreprocessor(MultiDiscrete([3, 2]))
    np.testing.assert_array_equal(prep.transform(np.array([[2, 0]])), [[0, 0, 1, 1, 0]])
    prep = ObservationPreprocessor(MultiBinary([2, 2]))
    np.testing.assert_array_equal(prep.transform(np.array([[[1, 0], [0, 1]]], np.int8)), [[1, 0, 0, 1]])


@pytest.mark.parametrize("space", [box(84, 84, 3, low=0, high=255, dtype=np.uint8), Discrete(5), box(4)])
def test_top_level_box_and_discrete_pass_through_unchanged(space):
    prep = ObservationPreprocessor(space)
    assert prep.identity and prep.observation_space == space
    obs = np.zeros((2, *space.shape), space.dtype)
    assert prep.transform(obs) is obs


def test_action_mask_is_read_and_left_out_of_the_model_input():
    space = Dict({"action_mask": MultiBinary(3), "x": Discrete(2), "y": box(1)})
    prep = ObservationPreprocessor(space, Discrete(3))
    observations = {
        "action_mask": np.array([[1, 0, 1], [0, 1, 0]], np.int8),
        "x": np.array([1, 0]),
        "y": np.array([[0.5], [0.25]], np.float32),
    }
    np.testing.assert_array_equal(prep.transform(observations), [[0, 1, 0.5], [1, 0, 0.25]])
    mask = prep.action_mask(observations)
    assert mask.dtype == bool
    np.testing.assert_array_equal(mask, [[True, False, True], [False, True, False]])


def test_a_single_part_next_to_the_mask_passes_through_as_the_observation():
    image = box(4, 4, 2, low=0, high=255, dtype=np.uint8)
    prep = ObservationPreprocessor(Dict({"observation": image, "action_mask": MultiBinary(4)}), Discrete(4))
    assert prep.observation_space == image
    obs = {"observation": np.ones((3, 4, 4, 2), np.uint8), "action_mask": np.ones((3, 4), np.int8)}
    assert prep.transform(obs) is obs["observation"]


def test_masks_that_do_not_fit_the_action_space_are_config_errors():
    with pytest.raises(ConfigError, match="needs 3"):
        ObservationPreprocessor(Dict({"action_mask": MultiBinary(4), "x": box(1)}), Discrete(3), "MaskEnv")
    with pytest.raises(ConfigError, match="Discrete or MultiDiscrete"):
        ObservationPreprocessor(Dict({"action_mask": MultiBinary(2), "x": box(1)}), box(2), "MaskEnv")
    prep = ObservationPreprocessor(Dict({"action_mask": MultiBinary(5), "x": box(1)}), MultiDiscrete([2, 3]))
    assert prep.mask_width == 5


def test_a_mask_row_allowing_nothing_is_an_error_naming_the_env_except_at_last():
    prep = ObservationPreprocessor(Dict({"action_mask": MultiBinary(3), "x": box(1)}), Discrete(3), "MaskEnv")
    mask = np.array([[True, False, False], [False, False, False]])
    with pytest.raises(EnvDataError, match=r"MaskEnv.*slot\(s\) \[1\]"):
        prep.checked_mask(mask, np.array([StepType.MID, StepType.MID]), (3,))
    fixed = prep.checked_mask(mask, np.array([StepType.MID, StepType.LAST]), (3,))
    np.testing.assert_array_equal(fixed, [[True, False, False], [True, True, True]])
    # MultiDiscrete: each sub-action needs an allowed choice
    with pytest.raises(EnvDataError, match="per sub-action"):
        prep.checked_mask(np.array([[True, False, False, False, False]]), np.array([StepType.MID]), (2, 3))


def test_flat_actions_round_trip_with_the_documented_layout():
    space = Dict({"move": box(2), "fire": Discrete(3), "aim": MultiDiscrete([4, 2])})
    assert flat_action_dim(space) == 5  # aim (2), fire (1), move (2): sorted keys
    actions = {
        "move": np.array([[0.5, -0.5], [1.0, 0.25]], np.float32),
        "fire": np.array([2, 0]),
        "aim": np.array([[3, 1], [0, 0]]),
    }
    flat = flatten_action(space, actions)
    np.testing.assert_array_equal(flat, [[3, 1, 2, 0.5, -0.5], [0, 0, 0, 1.0, 0.25]])
    back = unflatten_action(space, flat)
    assert back["fire"].dtype == np.int64 and back["aim"].dtype == np.int64
    for key in actions:
        np.testing.assert_array_equal(back[key], actions[key])
    tuple_space = Tuple([Discrete(2), box(1)])
    back = unflatten_action(tuple_space, np.array([[1, 0.75]], np.float32))
    assert isinstance(back, tuple) and back[0].tolist() == [1] and back[1].tolist() == [[0.75]]


def test_clip_action_clips_bounded_box_parts_only():
    space = Tuple([Discrete(3), box(2)])
    clipped = clip_action(space, (np.array([2]), np.array([[3.0, -0.5]])))
    assert clipped[0].tolist() == [2] and clipped[1].tolist() == [[1.0, -0.5]]


def test_gymnasium_spaces_convert_recursively():
    space = gym.spaces.Dict(
        {
            "a": gym.spaces.MultiDiscrete([2, 3]),
            "b": gym.spaces.Tuple([gym.spaces.MultiBinary(4), gym.spaces.Discrete(5)]),
            "c": gym.spaces.Box(-1, 1, (2,), np.float32),
        }
    )
    assert convert_space(space, "observation", "Env") == Dict(
        {"a": MultiDiscrete([2, 3]), "b": Tuple([MultiBinary(4), Discrete(5)]), "c": box(2)}
    )
    with pytest.raises(ConfigError, match=r"observation\['a'\] values are 0\.\.2, e\.g\. a gymnasium Observ"):
        convert_space(gym.spaces.Dict({"a": gym.spaces.Discrete(3, start=1)}), "observation", "Env")
    with pytest.raises(
        ConfigError, match=r"action values are 0\.\.3, e\.g\. a gymnasium ActionWrapper adding -2"
    ):
        convert_space(gym.spaces.Discrete(4, start=-2), "action", "Env")
    with pytest.raises(ConfigError, match="Text"):
        convert_space(gym.spaces.Text(5), "observation", "Env")


def test_the_external_env_refuses_structured_spaces_naming_the_key():
    from rlgear.plugins.envs.external.settings import parse_settings

    box_json = box(3).to_json()
    with pytest.raises(ConfigError, match=r"env.kwargs.observation_space: .*Box and Discrete spaces only"):
        parse_settings({"observation_space": Dict({"a": box(3)}).to_json(), "action_space": box_json}, 2)
    with pytest.raises(ConfigError, match=r"env.kwargs.action_space: .*MultiDiscrete"):
        parse_settings({"observation_space": box_json, "action_space": MultiDiscrete([2, 2]).to_json()}, 2)


@pytest.mark.parametrize(
    "env_name", ["tests.spaces_envs:MaskedChoiceEnv", "tests.spaces_envs:TupleActionEnv"]
)
def test_check_vector_env_accepts_structured_spaces(env_name):
    from rlgear.plugins.envs.gymnasium_env import GymnasiumAdapter
    from rlgear.testing import check_vector_env

    env = GymnasiumAdapter().make(env_name, 3, kwargs={}, vectorization="sync")
    counts = check_vector_env(env, steps=60, seed=0)
    assert counts["steps"] > 0 and counts["episodes_truncated"] > 0


def test_an_observation_outside_its_discrete_part_is_an_error_naming_the_part():
    prep = ObservationPreprocessor(Dict({"kind": Discrete(3), "pos": box(1)}), Discrete(2))
    with pytest.raises(EnvDataError, match=r"observation\['kind'\]: values must be in 0..2, got 0..3"):
        prep.transform({"kind": np.array([0, 3]), "pos": np.zeros((2, 1), np.float32)})
