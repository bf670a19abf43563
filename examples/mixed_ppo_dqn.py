"""Two algorithms in one run: agent ``a`` learns with PPO, agent ``b`` with DQN, on one env.

rlgear's training step is composed from :mod:`rlgear.distributed.rollout_ops` (``rlgear.rollout_ops``
in the issue), and a multi-agent run already keeps one policy, one config and one batch per
policy id. So mixing algorithms needs no core change, only a small Trainer that

* builds each policy with its algorithm's policy class (``Trainer.policy_class`` may return any
  callable ``(observation_space, action_space, config) -> Policy``; the config it gets is the
  policy's own, with its ``multiagent.policies.<id>`` overrides applied);
* postprocesses each policy's fragments with its algorithm's postprocessing (GAE for PPO,
  n-step transitions for DQN; the evaluator passes the policy's own config);
* trains each policy its own way in ``training_step``: PPO's minibatch SGD on the fresh rows of
  its agents, DQN's replayed minibatches from its own buffer and its target network updates.

The policies' training sections share one dataclass, ``MixedConfig``, with PPO's and DQN's
fields and ``learner`` (which algorithm a policy learns with), so every override is still checked
key by key (``multiagent.policies.b.training.<key>``). Where both algorithms have a field of the
same name PPO's default applies, so a DQN policy sets ``train_batch_size`` (its replayed
minibatch) and ``lr`` itself. The run's own ``training`` section (the first policy's, unless
overridden) sets how many env steps one training step samples.

    python examples/mixed_ppo_dqn.py    # from a source checkout: the tests' cooperative matching game

Not covered by this example: checkpoints of the DQN policy's replay buffer (``save`` keeps both
policies' weights and optimizer state, as every multi-agent run does), remote workers (it runs
on the local evaluator), and the TF backend (``policies`` lists torch only).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Literal

from rlgear.blocks.replay_buffers import ReplayBuffer
from rlgear.config import RunConfig
from rlgear.config.schema import doc
from rlgear.distributed.rollout_ops import learn_per_policy, replay, synchronous_parallel_sample
from rlgear.errors import UnsupportedError
from rlgear.plugins.algorithms.dqn.config import DQNConfig
from rlgear.plugins.algorithms.dqn.dqn import DQN
from rlgear.plugins.algorithms.ppo.config import PPOConfig
from rlgear.plugins.algorithms.ppo.ppo import PPO
from rlgear.sample_batch import MultiAgentBatch, SampleBatch
from rlgear.trainer import Trainer

ALGORITHMS = {"ppo": PPO, "dqn": DQN}


@dataclasses.dataclass
class MixedConfig(PPOConfig, DQNConfig):
    learner: Literal["ppo", "dqn"] = doc("The algorithm this policy learns with.", "ppo")

    def check(self, fail) -> None:
        ALGORITHMS[self.learner].config_class.check(self, fail)
        if self.learner == "dqn" and self.prioritized_replay:
            raise fail("training.prioritized_replay", "this example replays uniformly; set it to false")


def algorithm_of(config: RunConfig) -> type[Trainer]:
    return ALGORITHMS[config.training.learner]


def mixed_torch_policy(observation_space: Any, action_space: Any, config: RunConfig) -> Any:
    """The policy of the algorithm ``config.training.learner`` names (the policy's own config)."""
    return algorithm_of(config).policy_class("torch")(observation_space, action_space, config)


class PPOAndDQN(Trainer):
    name = "ppo-and-dqn"
    description = "PPO for some policies, DQN for the others (multiagent.policies.<id>.training.learner)"
    config_class = MixedConfig
    action_spaces = frozenset({"discrete"})
    multi_agent = True

    @classmethod
    def policy_class(cls, backend: str) -> Any:
        if backend != "torch":
            raise UnsupportedError(
                f"algorithm '{cls.name}' does not support backend '{backend}' (supported: torch)"
            )
        return mixed_torch_policy

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        return algorithm_of(config).postprocess(fragment, policy, config)

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        #: A replay buffer (uniform) for each DQN policy, sized by its own config.
        self.replay_buffers = {
            pid: ReplayBuffer(policy.config.training.buffer_size, seed=config.seed)
            for pid, policy in self.policy_map.items()
            if policy.config.training.learner == "dqn"
        }
        self.last_target_update = {pid: 0 for pid in self.replay_buffers}

    def training_step(self) -> dict[str, float]:
        batch, steps = synchronous_parallel_sample(self.workers, self.config.training.train_batch_size)
        if not isinstance(batch, MultiAgentBatch):
            raise TypeError(
                f"{self.name} runs on multi-agent envs; env '{self.config.env.name}' has one agent"
            )
        timesteps = self.timesteps_total + steps
        for policy in self.policy_map.values():
            policy.set_global_timestep(timesteps)  # lr schedules; DQN's epsilon while acting
        trained = self.policies_to_train
        on_policy = [pid for pid in trained if pid not in self.replay_buffers]
        stats = learn_per_policy(self.policy_map, batch, on_policy)  # PPO: SGD on the fresh rows
        for pid in [pid for pid in trained if pid in self.replay_buffers]:
            stats.update(
                {f"{pid}/{k}": v for k, v in self.dqn_step(pid, batch.get(pid), steps, timesteps).items()}
            )
        self.workers.sync_weights()
        return self.learner_stats(stats)

    def dqn_step(self, pid: str, rows: SampleBatch | None, steps: int, timesteps: int) -> dict[str, float]:
        """DQN's step for one policy: store its transitions, learn from replay, update the target."""
        policy, buffer = self.policy_map[pid], self.replay_buffers[pid]
        training = policy.config.training
        if rows is not None and len(rows):
            buffer.add(rows)
        stats = {"epsilon": policy.epsilon(), "replay_buffer_size": float(len(buffer))}
        if timesteps < training.learning_starts or len(buffer) == 0:
            return stats
        gradient_steps = max(1, round(steps * training.training_intensity / training.train_batch_size))
        for _ in range(gradient_steps):
            stats.update(policy.learn_on_batch(replay(buffer, training.train_batch_size)))
        if timesteps - self.last_target_update[pid] >= training.target_network_update_freq:
            policy.update_target(training.tau)
            self.last_target_update[pid] = timesteps
        return stats


def cooperative_match_config(seed: int = 0) -> dict[str, Any]:
    """The tests' matching game (tests/multi_agent_envs.py: make_match): ``a`` with PPO, ``b`` with DQN."""
    return {
        "algorithm": "ppo",
        "seed": seed,
        "env": {"adapter": "vector", "name": "tests.multi_agent_envs:make_match"},
        "workers": {"num_envs_per_worker": 8, "rollout_fragment_length": 32},
        "model": {"hidden_sizes": [32]},
        "training": {
            "learner": "ppo",
            "train_batch_size": 256,
            "sgd_minibatch_size": 128,
            "num_sgd_iter": 4,
            "lr": 1e-3,
        },
        "multiagent": {
            "policies": {
                "a": {},
                "b": {
                    "training": {
                        "learner": "dqn",
                        "lr": 1e-3,
                        "train_batch_size": 64,
                        "learning_starts": 500,
                        "epsilon_timesteps": 4000,
                        "target_network_update_freq": 500,
                    }
                },
            },
            "policy_mapping": {"a": "a", "b": "b"},
        },
    }


def main() -> None:
    trainer = PPOAndDQN(cooperative_match_config())
    try:
        for _ in range(40):
            result = trainer.train()
            print(
                f"{result['timesteps_total']:>6} env steps  return {result['episode_return_mean']:.2f} "
                f"(optimum 16)  dqn epsilon {result.get('learner/b/epsilon', float('nan')):.2f}"
            )
    finally:
        trainer.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: tests.multi_agent_envs
    main()
