"""MAPPO's hyperparameters: PPO's, plus what the centralised critic sees and value normalization."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlgear.config.schema import doc
from rlgear.plugins.algorithms.ppo.config import PPOConfig
from rlgear.plugins.algorithms.ppo.mappo.critic_input import MODES


@dataclass
class MAPPOConfig(PPOConfig):
    critic_input: Literal["auto", "state", "joint_obs", "local"] = doc(
        "What the critic sees: state (the env's global state, PettingZoo's state()), joint_obs (every "
        "agent's observation at the same env step, possible_agents order, zeros for an absent agent), "
        "each with the agent's one-hot index; local (the agent's own observation: ippo, for ablations); "
        "auto: state when the env gives one, else joint_obs.",
        "auto",
    )
    value_normalization: bool = doc(
        "MAPPO's ValueNorm: the critic predicts values normalized by a running, debiased mean and "
        "variance of the value targets (updated once per train batch); GAE uses them denormalized. "
        "Off by default: with Adam it speeds the critic up by the values' scale, which on time-limited "
        "envs at gamma near 1 (bootstrapped values far beyond an episode's return) gives noisy "
        "advantages and slows learning (docs/multi-agent.md).",
        False,
    )

    def check(self, fail) -> None:
        super().check(fail)
        if self.critic_input not in MODES:
            raise fail(
                "training.critic_input", f"expected one of {', '.join(MODES)}, got {self.critic_input!r}"
            )
        if self.use_sde:
            raise fail("training.use_sde", "expected false: mappo has no gSDE exploration (use ppo for gSDE)")
