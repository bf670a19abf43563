"""Tests of the run configuration: reading YAML, ``--set`` overrides and validation.

Every error here is a :class:`rlgear.errors.ConfigError` whose one-line message
must say where (the file, or the ``--set`` that caused it), which key (the
dotted path), what was expected and what was given, and for an unknown key the
closest valid one (docs/architecture.md, "Config").
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from rlgear import config as C
from rlgear.config import RunConfig, TrainingConfig
from rlgear.errors import ConfigError, RLGearError

SOURCE = "my-run.yaml"


def base(**sections) -> dict:
    """The smallest valid PPO config, with extra top-level sections."""
    return {"algorithm": "ppo", "env": {"name": "CartPole-v1"}, **sections}


def error_of(data, overrides=(), source=SOURCE, training_class=None) -> str:
    with pytest.raises(ConfigError) as info:
        C.resolve(data, source, overrides, training_class=training_class)
    message = str(info.value)
    assert "\n" not in message, f"error is not one line: {message!r}"
    return message


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- defaults


def test_minimal_config_resolves_with_algorithm_defaults():
    config = C.resolve(base(), SOURCE)
    assert isinstance(config, RunConfig)
    assert config.algorithm == "ppo"
    assert config.backend == "torch"
    assert config.env.name == "CartPole-v1"
    assert config.env.adapter == "gymnasium"
    # training is the algorithm's own config class (found through the registry)
    assert type(config.training).__name__ == "PPOConfig"
    assert isinstance(config.training, TrainingConfig)
    assert config.training.lr == pytest.approx(3e-4)
    assert config.source == SOURCE


def test_config_errors_are_user_errors():
    assert issubclass(ConfigError, RLGearError)


# --------------------------------------------------------------------------- unknown keys


def test_unknown_top_level_key_names_file_key_and_closest_key():
    message = error_of(base(trainig={"lr": 0.1}))
    assert message.startswith(f"{SOURCE}: trainig: unknown key")
    assert "did you mean 'training'" in message


def test_unknown_nested_key_names_file_dotted_path_and_closest_key():
    message = error_of(base(training={"lrr": 0.1}))
    assert SOURCE in message
    assert "training.lrr" in message
    assert "did you mean 'lr'" in message


def test_unknown_key_in_algorithm_specific_section_suggests_algorithm_key():
    message = error_of(base(training={"num_sgd_iters": 3}))
    assert "training.num_sgd_iters" in message
    assert "did you mean 'num_sgd_iter'" in message


def test_unknown_key_in_a_file_names_the_file_path(tmp_path):
    path = write(tmp_path, "algorithm: ppo\nenv: {name: CartPole-v1}\ntraining: {lrr: 0.1}\n")
    with pytest.raises(ConfigError) as info:
        C.load(path)
    message = str(info.value)
    assert str(path) in message
    assert "training.lrr" in message
    assert "did you mean 'lr'" in message


def test_unknown_key_far_from_any_valid_key_has_no_suggestion():
    message = error_of(base(workers={"zzzzqqq": 1}))
    assert "workers.zzzzqqq: unknown key" in message
    assert "did you mean" not in message


# --------------------------------------------------------------------------- types


def test_wrong_type_names_key_expected_type_and_given_value():
    message = error_of(base(training={"lr": "fast"}))
    assert message == f"{SOURCE}: training.lr: expected a number, got 'fast' (str)"


def test_wrong_type_for_a_section_says_a_mapping_was_expected():
    message = error_of(base(workers=[1, 2]))
    assert "workers" in message
    assert "expected a mapping" in message


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("training", "train_batch_size", True),
        ("workers", "num_envs_per_worker", False),
        ("checkpoint", "every", True),
    ],
)
def test_bool_is_not_accepted_where_an_integer_is_expected(section, key, value):
    message = error_of(base(**{section: {key: value}}))
    assert f"{section}.{key}: expected an integer, got {value!r} (bool)" in message


def test_bool_is_not_accepted_where_a_number_is_expected():
    message = error_of(base(training={"gamma": True}))
    assert "training.gamma: expected a number, got True (bool)" in message


def test_integer_is_accepted_as_float():
    config = C.resolve(base(training={"lr": 1, "gamma": 1}), SOURCE)
    assert config.training.lr == 1.0
    assert isinstance(config.training.lr, float)
    assert isinstance(config.training.gamma, float)


def test_integral_float_such_as_1e6_is_accepted_as_integer():
    config = C.resolve(base(training={"train_batch_size": 1e6}), SOURCE)
    assert config.training.train_batch_size == 1_000_000
    assert type(config.training.train_batch_size) is int


def test_fractional_float_is_not_accepted_as_integer():
    message = error_of(base(training={"train_batch_size": 100.5}))
    assert "training.train_batch_size: expected an integer, got 100.5 (float)" in message


def test_scientific_notation_in_a_yaml_file_is_read_as_numbers(tmp_path):
    # `lr: 3e-4` and `1e6` are how most people write these numbers in a config.
    path = write(
        tmp_path,
        "algorithm: ppo\nenv: {name: CartPole-v1}\n"
        "training:\n  lr: 3e-4\n  train_batch_size: 1e6\nstop:\n  timesteps_total: 1e6\n",
    )
    config = C.load(path)
    assert config.training.lr == pytest.approx(3e-4)
    assert config.training.train_batch_size == 1_000_000
    assert config.stop["timesteps_total"] == 1_000_000


def test_scientific_notation_in_a_set_override_is_read_as_a_number():
    config = C.resolve(base(), SOURCE, ["training.lr=1e-3"])
    assert config.training.lr == pytest.approx(1e-3)


def test_literal_accepts_each_listed_choice():
    for mode in ("truncate_episodes", "complete_episodes"):
        config = C.resolve(base(workers={"batch_mode": mode}), SOURCE)
        assert config.workers.batch_mode == mode


def test_literal_rejects_other_values_listing_the_choices_and_closest_one():
    message = error_of(base(workers={"batch_mode": "complete_episode"}))
    assert "workers.batch_mode" in message
    assert "truncate_episodes" in message and "complete_episodes" in message
    assert "'complete_episode'" in message
    assert "did you mean 'complete_episodes'" in message


def test_int_or_auto_accepts_both_and_rejects_other_strings():
    auto = C.resolve(base(workers={"rollout_fragment_length": "auto"}), SOURCE)
    assert auto.workers.rollout_fragment_length == "auto"
    fixed = C.resolve(base(workers={"rollout_fragment_length": 16}), SOURCE)
    assert fixed.workers.rollout_fragment_length == 16
    message = error_of(base(workers={"rollout_fragment_length": "atuo"}))
    assert "workers.rollout_fragment_length" in message
    assert "an integer or one of auto" in message


def test_optional_field_accepts_null():
    config = C.resolve(base(training={"grad_clip": None}, workers={"horizon": None}), SOURCE)
    assert config.training.grad_clip is None
    assert config.workers.horizon is None


def test_list_item_of_wrong_type_is_reported_with_its_index():
    message = error_of(base(model={"hidden_sizes": [64, "x"]}))
    assert "model.hidden_sizes[1]: expected an integer, got 'x' (str)" in message


def test_nested_list_type_is_described_readably():
    message = error_of(base(training={"lr_schedule": [[0, "a"]]}))
    assert "training.lr_schedule" in message
    assert "'a'" in message
    # "a list of list of numberss" is what a naive pluralisation produces
    assert "numberss" not in message
    assert "list of lists of numbers" in message


def test_algorithm_name_must_be_a_string():
    message = error_of({"algorithm": 3, "env": {"name": "CartPole-v1"}})
    assert "algorithm" in message and "3" in message


def test_stop_threshold_must_be_a_number():
    message = error_of(base(stop={"timesteps_total": "lots"}))
    assert "stop.timesteps_total" in message and "'lots'" in message


def test_seed_must_be_an_integer_or_null():
    assert C.resolve(base(seed=None), SOURCE).seed is None
    assert C.resolve(base(seed=7), SOURCE).seed == 7
    message = error_of(base(seed="seven"))
    assert "seed" in message and "'seven'" in message


# --------------------------------------------------------------------------- required keys


def test_missing_env_name_is_reported_with_its_path():
    message = error_of({"algorithm": "ppo", "env": {}})
    assert message.startswith(f"{SOURCE}: env.name: missing required key")


def test_missing_env_section_is_reported():
    message = error_of({"algorithm": "ppo"})
    assert message.startswith(f"{SOURCE}: env: missing required key")


def test_missing_algorithm_is_reported():
    message = error_of({"env": {"name": "CartPole-v1"}})
    assert message.startswith(f"{SOURCE}: algorithm: missing required key")


def test_empty_file_reports_the_first_missing_required_key(tmp_path):
    path = write(tmp_path, "")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: algorithm: missing required key")):
        C.load(path)


# --------------------------------------------------------------------------- reading YAML


def test_read_yaml_returns_the_mapping(tmp_path):
    path = write(tmp_path, "algorithm: ppo\nenv:\n  name: CartPole-v1\n")
    assert C.read_yaml(path) == {"algorithm": "ppo", "env": {"name": "CartPole-v1"}}


def test_malformed_yaml_reports_file_line_and_column(tmp_path):
    path = write(
        tmp_path,
        "algorithm: ppo\nenv: {name: CartPole-v1}\ntraining:\n  lr: 0.1\n   gamma: 0.9\n",
    )
    with pytest.raises(ConfigError) as info:
        C.read_yaml(path)
    message = str(info.value)
    assert message.startswith(f"{path}:5:9: malformed YAML")
    assert "\n" not in message


def test_unclosed_flow_mapping_reports_a_location(tmp_path):
    path = write(tmp_path, "algorithm: ppo\nenv: {name: CartPole-v1\n")
    with pytest.raises(ConfigError) as info:
        C.read_yaml(path)
    message = str(info.value)
    assert re.match(rf"{re.escape(str(path))}:\d+:\d+: malformed YAML", message), message
    assert "\n" not in message


def test_file_that_is_not_a_mapping_is_rejected(tmp_path):
    path = write(tmp_path, "- algorithm\n- ppo\n")
    with pytest.raises(ConfigError) as info:
        C.read_yaml(path)
    assert str(info.value) == f"{path}: expected a mapping of config keys, got list"


def test_scalar_file_is_rejected(tmp_path):
    path = write(tmp_path, "just a string\n")
    with pytest.raises(ConfigError, match="expected a mapping of config keys, got str"):
        C.read_yaml(path)


def test_missing_file_is_reported(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        C.load(path)
    assert str(info.value) == f"{path}: no such config file"


def test_directory_instead_of_file_is_reported(tmp_path):
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path}: cannot read config file")):
        C.read_yaml(tmp_path)


def test_resolve_rejects_a_non_mapping():
    with pytest.raises(ConfigError, match="expected a mapping of config keys, got list"):
        C.resolve(["algorithm", "ppo"], SOURCE)


# --------------------------------------------------------------------------- search spaces


@pytest.mark.parametrize(
    "sections",
    [
        {"training": {"lr": {"grid_search": [1e-3, 1e-4]}}},
        {"training": {"gamma": {"uniform": [0.9, 0.99]}}},
        {"model": {"hidden_sizes": {"choice": [[64], [64, 64]]}}},
        {"workers": {"num_envs_per_worker": {"randint": [1, 8]}}},
        {"seed": {"grid_search": [0, 1, 2]}},
        {"stop": {"timesteps_total": {"grid_search": [1000, 2000]}}},
    ],
    ids=["training.lr", "training.gamma", "model.hidden_sizes", "workers.num_envs", "seed", "stop"],
)
def test_search_space_in_a_train_config_points_to_rlgear_tune(sections):
    message = error_of(base(**sections))
    assert "rlgear tune" in message
    key = next(iter(sections))
    assert key in message


def test_tune_section_points_to_rlgear_tune():
    message = error_of(base(tune={"metric": "episode_return_mean"}))
    assert message.startswith(f"{SOURCE}: tune:")
    assert "rlgear tune" in message


# --------------------------------------------------------------------------- --set overrides


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("training.lr=0.001", ("training.lr", 0.001)),
        ("model.hidden_sizes=[64, 64]", ("model.hidden_sizes", [64, 64])),
        ("model.vf_share_layers=true", ("model.vf_share_layers", True)),
        ("seed=null", ("seed", None)),
        ("env.name=CartPole-v1", ("env.name", "CartPole-v1")),
        ("env.kwargs={a: 1}", ("env.kwargs", {"a": 1})),
        ("logging.name=a=b", ("logging.name", "a=b")),
        (" training.lr = 0.5", ("training.lr", 0.5)),
    ],
)
def test_parse_override_splits_key_and_parses_value_as_yaml(text, expected):
    assert C.parse_override(text) == expected


def test_parse_override_keeps_unparseable_yaml_as_text():
    assert C.parse_override("env.name=[oops") == ("env.name", "[oops")


@pytest.mark.parametrize("text", ["training.lr", "=0.1", "", "   =1"])
def test_malformed_set_without_key_or_equals_sign_is_an_error(text):
    with pytest.raises(ConfigError) as info:
        C.parse_override(text)
    message = str(info.value)
    assert message.startswith(f"--set {text}:")
    assert "KEY.PATH=VALUE" in message


def test_malformed_set_is_reported_by_resolve():
    with pytest.raises(ConfigError, match=re.escape("--set training.lr: expected KEY.PATH=VALUE")):
        C.resolve(base(), SOURCE, ["training.lr"])


def test_apply_overrides_creates_nested_mappings_and_leaves_input_alone():
    data = {"algorithm": "ppo"}
    new, origins = C.apply_overrides(data, ["env.kwargs.render_mode=null", "training.lr=0.001"])
    assert new == {
        "algorithm": "ppo",
        "env": {"kwargs": {"render_mode": None}},
        "training": {"lr": 0.001},
    }
    assert data == {"algorithm": "ppo"}
    assert origins == {
        "env.kwargs.render_mode": "env.kwargs.render_mode=null",
        "training.lr": "training.lr=0.001",
    }


def test_apply_overrides_does_not_mutate_nested_input():
    data = base(training={"lr": 0.1})
    C.apply_overrides(data, ["training.lr=0.2"])
    assert data["training"]["lr"] == 0.1


def test_later_override_wins():
    config = C.resolve(base(), SOURCE, ["training.lr=0.1", "training.lr=0.2"])
    assert config.training.lr == 0.2


def test_override_through_a_scalar_is_an_error():
    with pytest.raises(ConfigError) as info:
        C.apply_overrides(base(seed=3), ["seed.value=1"])
    assert str(info.value).startswith("--set seed.value=1: 'seed' is not a mapping")


def test_overrides_replace_file_values_with_parsed_types():
    config = C.resolve(
        base(training={"lr": 0.5}, model={"hidden_sizes": [8]}),
        SOURCE,
        ["training.lr=0.001", "model.hidden_sizes=[64, 64]", "model.vf_share_layers=true"],
    )
    assert config.training.lr == 0.001
    assert config.model.hidden_sizes == [64, 64]
    assert config.model.vf_share_layers is True


def test_override_creates_a_section_the_file_does_not_have(tmp_path):
    path = write(tmp_path, "algorithm: ppo\nenv: {name: CartPole-v1}\n")
    config = C.load(path, ["workers.num_envs_per_worker=2", "env.kwargs.max_episode_steps=50"])
    assert config.workers.num_envs_per_worker == 2
    assert config.env.kwargs == {"max_episode_steps": 50}


def test_override_can_supply_a_required_key():
    config = C.resolve({"algorithm": "ppo"}, SOURCE, ["env.name=CartPole-v1"])
    assert config.env.name == "CartPole-v1"


def test_error_in_an_overridden_value_blames_the_set_not_the_file():
    message = error_of(base(training={"lr": 0.1}), ["training.lr=fast"])
    assert message == "--set training.lr=fast: training.lr: expected a number, got 'fast' (str)"
    assert SOURCE not in message


def test_unknown_key_from_an_override_blames_the_set():
    message = error_of(base(), ["training.lrr=0.1"])
    assert message.startswith("--set training.lrr=0.1: training.lrr: unknown key")
    assert "did you mean 'lr'" in message


def test_unknown_top_level_key_from_an_override_blames_the_set():
    message = error_of(base(), ["trainig.lr=0.1"])
    assert message.startswith("--set trainig.lr=0.1: trainig: unknown key")
    assert "did you mean 'training'" in message


def test_error_inside_a_mapping_set_as_a_whole_blames_the_set():
    message = error_of(base(), ["training={lrr: 1}"])
    assert message.startswith("--set training={lrr: 1}: training.lrr: unknown key")


def test_error_in_the_file_still_blames_the_file_when_overrides_are_given():
    message = error_of(base(training={"lrr": 0.1}), ["training.lr=0.2"])
    assert message.startswith(f"{SOURCE}: training.lrr: unknown key")


def test_error_in_a_list_item_of_an_overridden_value_blames_the_set():
    message = error_of(base(), ["model.hidden_sizes=[64, x]"])
    assert message.startswith("--set model.hidden_sizes=[64, x]: model.hidden_sizes[1]:")
    assert SOURCE not in message


def test_range_error_in_an_overridden_list_blames_the_set():
    message = error_of(base(), ["training.lr_schedule=[[0, 1, 2]]"])
    assert message.startswith("--set training.lr_schedule=[[0, 1, 2]]: training.lr_schedule")
    assert SOURCE not in message


def test_range_error_from_an_override_blames_the_set():
    message = error_of(base(), ["training.gamma=1.5"])
    assert message.startswith("--set training.gamma=1.5: training.gamma:")


# --------------------------------------------------------------------------- range checks


@pytest.mark.parametrize(
    ("sections", "path"),
    [
        ({"workers": {"num_envs_per_worker": 0}}, "workers.num_envs_per_worker"),
        ({"workers": {"num_cpus_for_driver": 0}}, "workers.num_cpus_for_driver"),
        ({"workers": {"rollout_fragment_length": 0}}, "workers.rollout_fragment_length"),
        ({"workers": {"horizon": -5}}, "workers.horizon"),
        ({"workers": {"num_workers": -1}}, "workers.num_workers"),
        ({"training": {"gamma": 1.5}}, "training.gamma"),
        ({"training": {"gamma": -0.1}}, "training.gamma"),
        ({"training": {"train_batch_size": 0}}, "training.train_batch_size"),
        ({"training": {"metrics_window": 0}}, "training.metrics_window"),
        ({"training": {"gae_lambda": 2.0}}, "training.gae_lambda"),
        ({"training": {"clip_param": 0.0}}, "training.clip_param"),
        ({"training": {"sgd_minibatch_size": 0}}, "training.sgd_minibatch_size"),
        ({"training": {"lr_schedule": [[0, 1e-3, 5]]}}, "training.lr_schedule[0]"),
        ({"checkpoint": {"every": -1}}, "checkpoint.every"),
        ({"checkpoint": {"keep": 0}}, "checkpoint.keep"),
    ],
)
def test_out_of_range_values_are_rejected_with_their_key_path(sections, path):
    message = error_of(base(**sections))
    assert message.startswith(f"{SOURCE}: {path}: expected")


def test_remote_worker_keys_are_validated_with_their_key_path():
    config = C.resolve(base(workers={"num_workers": 2, "ray": {"address": "auto"}}), SOURCE)
    assert config.workers.num_workers == 2 and config.workers.ray.address == "auto"
    assert config.workers.recreate_failed is True
    assert error_of(base(workers={"ray": {"adress": "auto"}})).startswith(
        f"{SOURCE}: workers.ray.adress: unknown key; did you mean 'address'?"
    )
    assert error_of(base(workers={"max_restarts": -1})).startswith(
        f"{SOURCE}: workers.max_restarts: expected"
    )


def test_boundary_values_are_accepted():
    config = C.resolve(
        base(training={"gamma": 1.0, "gae_lambda": 0.0}, checkpoint={"every": 0, "keep": 1}),
        SOURCE,
    )
    assert config.training.gamma == 1.0
    assert config.checkpoint.keep == 1


# Values that pass validation today but crash the run later with a traceback
# (found by running them through rlgear.train); each must be a ConfigError.
@pytest.mark.parametrize(
    ("sections", "path"),
    [
        ({"seed": -1}, "seed"),
        ({"training": {"lr": -0.001}}, "training.lr"),
        ({"model": {"hidden_sizes": [64, -3]}}, "model.hidden_sizes"),
        (
            {"training": {"evaluation_interval": 1, "evaluation_episodes": 0}},
            "training.evaluation_episodes",
        ),
    ],
    ids=["negative-seed", "negative-lr", "negative-layer-size", "zero-evaluation-episodes"],
)
def test_values_that_would_crash_the_run_are_rejected_up_front(sections, path):
    message = error_of(base(**sections))
    assert path in message


# --------------------------------------------------------------------------- training_class


@dataclasses.dataclass
class TinyConfig(TrainingConfig):
    horizon_bonus: int = 3


def test_explicit_training_class_is_used_instead_of_the_registry():
    config = C.resolve(
        {"algorithm": "not-installed-algo", "env": {"name": "X-v0"}, "training": {"horizon_bonus": 5}},
        SOURCE,
        training_class=TinyConfig,
    )
    assert isinstance(config.training, TinyConfig)
    assert config.training.horizon_bonus == 5


def test_explicit_training_class_validates_its_own_keys():
    message = error_of(
        {"algorithm": "x", "env": {"name": "X-v0"}, "training": {"horizon_bonuss": 5}},
        training_class=TinyConfig,
    )
    assert "training.horizon_bonuss" in message
    assert "did you mean 'horizon_bonus'" in message


# --------------------------------------------------------------------------- round trip


def full_config() -> dict:
    return base(
        backend="torch",
        env={"name": "CartPole-v1", "kwargs": {"max_episode_steps": 100}, "vectorization": "sync"},
        model={"hidden_sizes": [32, 16], "activation": "relu", "vf_share_layers": True},
        training={
            "lr": 1e-3,
            "lr_schedule": [[0, 1e-3], [10000, 0.0]],
            "train_batch_size": 512,
            "gamma": 0.98,
            "grad_clip": None,
        },
        workers={"num_envs_per_worker": 4, "rollout_fragment_length": 64, "batch_mode": "complete_episodes"},
        stop={"timesteps_total": 10000, "episode_return_mean": 475.5},
        checkpoint={"every": 2, "keep": None, "at_end": False},
        logging={"dir": "/tmp/somewhere", "name": "run1", "tensorboard": False, "progress": "plain"},
        seed=123,
    )


def test_resolved_config_round_trips_through_to_dict():
    config = C.resolve(full_config(), SOURCE)
    again = C.resolve(config.to_dict(), SOURCE)
    assert again == config
    assert again.to_dict() == config.to_dict()


def test_default_config_round_trips_through_to_dict():
    config = C.resolve(base(), SOURCE)
    assert C.resolve(config.to_dict(), SOURCE) == config


def test_to_dict_has_only_config_keys():
    data = C.resolve(base(), SOURCE).to_dict()
    assert "source" not in data
    assert set(data) <= set(C.TOP_LEVEL_KEYS)


def test_resolved_config_round_trips_through_saved_yaml(tmp_path):
    config = C.resolve(full_config(), SOURCE)
    path = write(tmp_path, C.dump_yaml(config.to_dict()), "config.yaml")
    again = C.load(path)
    assert again.to_dict() == config.to_dict()


def test_resolve_does_not_mutate_its_input():
    data = full_config()
    snapshot = yaml.safe_load(yaml.safe_dump(data))
    C.resolve(data, SOURCE, ["training.lr=0.5"])
    assert data == snapshot


# --------------------------------------------------------------------------- fragment length


@pytest.mark.parametrize(
    ("batch", "envs", "expected"),
    [(256, 8, 32), (200, 8, 25), (100, 8, 13), (5, 8, 1), (1, 1, 1), (4000, 1, 4000)],
)
def test_auto_rollout_fragment_length_is_batch_over_envs_rounded_up(batch, envs, expected):
    config = C.resolve(
        base(training={"train_batch_size": batch}, workers={"num_envs_per_worker": envs}), SOURCE
    )
    assert config.rollout_fragment_length() == expected
    # one sample() call collects at least a whole train batch
    assert config.rollout_fragment_length() * envs >= batch


def test_explicit_rollout_fragment_length_is_used_as_given():
    config = C.resolve(
        base(training={"train_batch_size": 256}, workers={"rollout_fragment_length": 10}), SOURCE
    )
    assert config.rollout_fragment_length() == 10
