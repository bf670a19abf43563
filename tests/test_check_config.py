"""``Trainer.check_config``: where an algorithm refuses a config by keys outside ``training``."""

from __future__ import annotations

import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import ConfigError
from rlgear.plugins.algorithms.ppo import PPO
from tests.conftest import small_config


class TwoLayerPPO(PPO):
    """PPO that insists on at least two hidden layers (a check on ``model``, not ``training``)."""

    @classmethod
    def check_config(cls, config):
        if len(config.model.hidden_sizes) < 2:
            raise config.fail(
                "model.hidden_sizes", f"two_layer_ppo needs >= 2 layers, got {config.model.hidden_sizes}"
            )


def test_check_config_refuses_before_anything_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(TwoLayerPPO, "setup", lambda self, config: pytest.fail("setup ran"))
    raw = small_config(tmp_path, model={"hidden_sizes": [8]})
    with pytest.raises(ConfigError, match=r"^config: model.hidden_sizes: two_layer_ppo needs >= 2 layers"):
        TwoLayerPPO(raw)


def test_check_config_runs_when_the_config_is_resolved_and_names_the_set(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "load_algorithm", lambda name: TwoLayerPPO)
    raw = small_config(tmp_path)
    with pytest.raises(ConfigError, match=r"^--set model.hidden_sizes=\[8\]: model.hidden_sizes: two_layer"):
        config_mod.resolve(raw, overrides=["model.hidden_sizes=[8]"])
    assert config_mod.resolve(raw, overrides=["model.hidden_sizes=[8, 8]"]).model.hidden_sizes == [8, 8]


def test_the_default_check_config_accepts_every_config(tmp_path):
    config = config_mod.resolve(small_config(tmp_path))
    assert PPO.check_config(config) is None
