"""Every training config rlgear ships (``configs/*.yaml``) is valid as written.

Users start from these files; a key renamed in a config class, a refused combination or a typo in a
file that no learning test reads would otherwise only show when a user runs it. Loading validates the
whole file against the algorithm's config class (unknown keys, types, ranges, cross-section checks)
without building an env or a policy, so this is cheap and needs no optional extra. (The experiment files under ``configs/tune/`` hold
search spaces, which only ``rlgear tune`` expands: tests/test_tune_*.py run them.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlgear.config.loading import load
from rlgear.config.yaml_io import read_yaml

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
TRAIN_CONFIGS = sorted(CONFIGS.glob("*.yaml"))


def test_there_are_configs_to_check():
    assert len(TRAIN_CONFIGS) >= 40


#: The env adapters whose configs need an optional extra to validate (the adapter is loaded to check
#: its own keys): the extra, and the module whose absence means it is not installed.
ADAPTER_EXTRAS = {"pettingzoo": ("pettingzoo", "pettingzoo")}


@pytest.mark.parametrize("path", TRAIN_CONFIGS, ids=lambda p: p.name)
def test_shipped_train_config_validates(path):
    adapter = (read_yaml(path).get("env") or {}).get("adapter")
    if adapter in ADAPTER_EXTRAS:
        extra, module = ADAPTER_EXTRAS[adapter]
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"env adapter {adapter!r} needs {module}: pip install 'rlgear[{extra}]'")
    config = load(path)
    assert config.algorithm == read_yaml(path)["algorithm"]
