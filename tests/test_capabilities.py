"""Algorithms declare what they support; an unsupported pairing fails before any training."""

from __future__ import annotations

import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.ppo import PPO
from tests.conftest import small_config


class DiscreteOnlyPPO(PPO):
    name = "discrete_only_ppo"
    action_spaces = frozenset({"discrete"})


def test_ppo_declares_discrete_and_continuous_actions_on_torch():
    caps = registry.load_algorithm("ppo").capabilities()
    assert caps == {
        "discrete": True,
        "continuous": True,
        "multi_discrete": True,
        "composite": True,
        "backends": ["tf", "torch"],
        "multi_agent": True,  # multiagent config section (issue 13)
        "recurrent": True,  # model.lstm (issue 14)
        "relational": True,  # model.relational (issue 33): the catalog actor-critic's encoder
        "league": True,  # a league section (issue 36): one policy per learning player
    }


def test_mappo_declares_multi_agent_feed_forward_discrete_and_continuous_on_both_backends():
    caps = registry.load_algorithm("mappo").capabilities()
    assert caps == {
        "discrete": True,
        "continuous": True,
        "multi_discrete": False,  # its numpy actor and critic input cover Discrete and Box
        "composite": False,
        "backends": ["tf", "torch"],
        "multi_agent": True,  # a centralised critic over the agents (issue 36)
        "recurrent": False,  # the actor and the critic are MLPs
        "relational": False,  # its critic is a network of its own
        "league": False,  # a centralised critic sees one game's agents; league players play apart
    }


@pytest.mark.parametrize("name", ["qmix", "vdn"])
def test_qmix_and_vdn_declare_multi_agent_recurrent_discrete_on_both_backends(name):
    caps = registry.load_algorithm(name).capabilities()
    assert caps == {
        "discrete": True,  # each agent's actions; the grouped team acts in a MultiDiscrete
        "continuous": False,
        "multi_discrete": False,
        "composite": False,
        "backends": ["tf", "torch"],
        "multi_agent": True,  # the agents are grouped into one team (issue 36)
        "recurrent": True,  # the GRU agent network is built in (model.lstm is refused)
        "relational": False,  # its own agent network
        "league": False,  # one team policy for all agents
    }
    assert registry.load_algorithm(name).groups_agents


@pytest.mark.parametrize("name", ["maddpg", "matd3", "masac"])
def test_maddpg_matd3_and_masac_declare_multi_agent_feed_forward_continuous_on_both_backends(name):
    caps = registry.load_algorithm(name).capabilities()
    assert caps == {
        "discrete": False,
        "continuous": True,  # each agent's Box; the grouped team acts in a Box [agents, A]
        "multi_discrete": False,
        "composite": False,
        "backends": ["tf", "torch"],
        "multi_agent": True,  # the agents are grouped into one team, a centralised critic (issue 36)
        "recurrent": False,  # MLP actor and critic (model.lstm is refused)
        "relational": False,  # its own actor and critic
        "league": False,  # one team policy for all agents
    }
    assert registry.load_algorithm(name).groups_agents


def test_continuous_env_with_a_discrete_only_algorithm_fails_before_training(tmp_path):
    config = config_mod.resolve(small_config(tmp_path, env={"name": "Pendulum-v1"}))
    with pytest.raises(UnsupportedError) as raised:
        DiscreteOnlyPPO(config)
    message = str(raised.value)
    assert "does not support continuous actions" in message and "Pendulum-v1" in message
    assert "\n" not in message
    assert not (tmp_path / "runs").exists()


def test_unsupported_backend_fails_before_any_env_is_built(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(
        "rlgear.sampling.rollout_worker.RolloutWorker.__init__", lambda *a, **k: built.append(1)
    )
    config = config_mod.resolve(small_config(tmp_path, backend="jax"))
    with pytest.raises(UnsupportedError, match="does not support backend 'jax' \\(supported: tf, torch\\)"):
        PPO(config)
    assert built == []


def test_unsupported_action_space_is_refused_before_the_policy_is_built(tmp_path, monkeypatch):
    built = []
    original = PPO.policy_class("torch").__init__
    monkeypatch.setattr(
        PPO.policy_class("torch"),
        "__init__",
        lambda self, *a, **k: built.append(1) or original(self, *a, **k),
    )
    config = config_mod.resolve(small_config(tmp_path, env={"name": "Pendulum-v1"}))
    with pytest.raises(UnsupportedError):
        DiscreteOnlyPPO(config)
    assert built == []
