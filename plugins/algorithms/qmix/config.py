"""QMIX and VDN hyperparameters (defaults: PyMARL's ``qmix.yaml`` / ``vdn.yaml``, Samvelyan et al. 2019).

The sampling and replay keys are the shared :class:`rlgear.plugins.families.replay.config.ReplayConfig`,
read with episodes as the replay rows: ``buffer_size`` and ``train_batch_size`` count whole team
episodes, and ``training_intensity`` is the replayed episodes learned from per sampled env step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rlgear.config.schema import doc
from rlgear.plugins.families.replay.config import ReplayConfig


@dataclass
class QMixConfig(ReplayConfig):
    mixer: Literal["qmix", "vdn"] = doc(
        "How the agents' Q-values make the team's: 'qmix' (Rashid et al. 2018), a monotonic mixing "
        "network whose weights come from hypernetworks on the global state; 'vdn' (Sunehag et al. "
        "2018), their sum. algorithm: vdn is qmix with 'vdn' here.",
        "qmix",
    )
    lr: float = doc("Learning rate (PyMARL: RMSprop, 5e-4).", 5e-4)
    optimizer: str = doc(
        "Optimizer (PyMARL's is rmsprop with alpha 0.99 and eps 1e-5, see optimizer_kwargs); any value "
        "training.optimizer takes elsewhere.",
        "rmsprop",
    )
    optimizer_kwargs: dict[str, Any] = doc(
        "Keyword arguments of the optimizer besides the learning rate (PyMARL's RMSprop: alpha 0.99, "
        "eps 1e-5; clear them for another optimizer).",
        factory=lambda: {"alpha": 0.99, "eps": 1e-5},
    )
    gamma: float = doc("Discount factor.", 0.99)
    grad_clip: float | None = doc("Clip the global gradient norm to this value (null: off).", 10.0)
    bootstrap_truncated: bool = doc(
        "Bootstrap the team's value past an episode the env truncated (a time limit): the targets of "
        "an infinite-horizon return. false: a truncated episode's last transition gets discount 0, "
        "the finite-horizon return the limit defines, as EPyMARL's MPE runs did. Needed where "
        "episodes never terminate (MPE): bootstrapping past the limit, QMIX's values grow without "
        "bound there (see rlgear.plugins.algorithms.qmix.learning_batch).",
        True,
    )
    standardise_rewards: bool = doc(
        "Standardise the team rewards the loss sees by running statistics of the replayed rewards, "
        "(r - mean) / std, as EPyMARL's QMIX does by default (standardise_rewards); PyMARL's default "
        "is off. On MPE it does not stop QMIX's values diverging by itself: bootstrap_truncated "
        "does (docs/multi-agent.md).",
        False,
    )
    buffer_size: int = doc("Capacity of the episodic replay buffer, in team episodes.", 5000)
    train_batch_size: int = doc("Team episodes replayed per gradient step.", 32)
    env_steps_per_training_step: int = doc(
        "Env steps sampled per training step, in whole episodes (workers.batch_mode: "
        "complete_episodes): each training step samples at least this many.",
        100,
    )
    training_intensity: float = doc(
        "Replayed episodes learned from per sampled env step: each training step makes "
        "round(sampled env steps x training_intensity / train_batch_size) gradient steps (at least 1). "
        "PyMARL makes one gradient step per sampled episode: train_batch_size / episode length.",
        1.28,
    )
    learning_starts: int = doc("Env steps sampled before the first gradient step.", 1000)
    max_episode_len: int = doc(
        "Longest team episode the replay buffer holds, in env steps (PyMARL's episode_limit): episodes "
        "are stored padded to it. A longer episode is an error; set workers.horizon to cut them.",
        100,
    )

    # --- target networks ------------------------------------------------------------------
    target_network_update_freq: int = doc(
        "Env steps between copies of the agent network and the mixer into their target networks "
        "(PyMARL copies every 200 episodes).",
        5000,
    )
    double_q: bool = doc(
        "Double Q-learning (van Hasselt et al. 2016): the online agent network picks each agent's "
        "next action (among its allowed ones), the target network values it; false: the target "
        "network's own max.",
        True,
    )

    # --- networks ------------------------------------------------------------------------
    rnn_hidden_dim: int = doc(
        "Width of the agent network: fc(rnn_hidden_dim) -> ReLU -> GRUCell(rnn_hidden_dim) -> one "
        "Q-value per action (PyMARL's RNNAgent).",
        64,
    )
    obs_last_action: bool = doc(
        "Give each agent its own previous action (one-hot; zeros at an episode's first step) as "
        "input besides its observation (PyMARL's obs_last_action).",
        True,
    )
    obs_agent_id: bool = doc(
        "Give each agent its one-hot index among the env's possible_agents as input, so one shared "
        "network can act differently per agent (PyMARL's obs_agent_id).",
        True,
    )
    mixing_embed_dim: int = doc("Width of the QMIX mixing network's hidden layer.", 32)
    hypernet_layers: int = doc(
        "Layers of the hypernetworks that make the mixing weights from the state: 1 (linear) or 2 "
        "(with a hidden layer of hypernet_embed units and ReLU).",
        2,
    )
    hypernet_embed: int = doc("Hidden width of two-layer hypernetworks.", 64)

    # --- exploration ---------------------------------------------------------------------
    epsilon_initial: float = doc("Probability of a random action per agent at the start.", 1.0)
    epsilon_final: float = doc("Probability of a random action per agent after epsilon_timesteps.", 0.05)
    epsilon_timesteps: int = doc(
        "Env steps over which epsilon falls linearly from epsilon_initial to epsilon_final.", 50_000
    )

    def check(self, fail) -> None:
        super().check(fail)
        for key in ("target_network_update_freq", "max_episode_len", "rnn_hidden_dim", "mixing_embed_dim"):
            if getattr(self, key) <= 0:
                raise fail(f"training.{key}", f"expected a positive integer, got {getattr(self, key)}")
        if self.hypernet_layers not in (1, 2):
            raise fail("training.hypernet_layers", f"expected 1 or 2, got {self.hypernet_layers}")
        if self.hypernet_embed <= 0:
            raise fail("training.hypernet_embed", f"expected a positive integer, got {self.hypernet_embed}")
        if self.epsilon_timesteps < 0:
            raise fail("training.epsilon_timesteps", f"expected 0 or more, got {self.epsilon_timesteps}")
        for key in ("epsilon_initial", "epsilon_final"):
            if not 0 <= getattr(self, key) <= 1:
                raise fail(f"training.{key}", f"expected a number in [0, 1], got {getattr(self, key)}")
        if self.n_step != 1:
            raise fail(
                "training.n_step",
                f"qmix learns one-step targets along whole episodes; set it to 1 (it is {self.n_step})",
            )
        if self.her_strategy is not None:
            raise fail("training.her_strategy", "qmix does not relabel goals; remove the key")
        if self.prioritized_replay:
            raise fail(
                "training.prioritized_replay",
                "qmix replays whole episodes uniformly (PyMARL's episode buffer); set it to false",
            )


@dataclass
class VDNConfig(QMixConfig):
    mixer: Literal["qmix", "vdn"] = doc(
        "How the agents' Q-values make the team's: 'vdn' (Sunehag et al. 2018), their sum; 'qmix' "
        "(Rashid et al. 2018), the monotonic mixing network on the global state.",
        "vdn",
    )
