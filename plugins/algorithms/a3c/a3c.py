"""A3C's postprocessing and training step, written once for every backend.

Mnih et al. 2016, Algorithm S3, with Ray actors in place of threads: each
worker holds a copy of the network, samples ``train_batch_size`` env steps
(n-step fragments), computes advantages and the gradient of the actor-critic
loss on them, and sends the gradient to the learner. The learner holds the
global network, as a parameter server does: it applies every gradient as it
arrives (one optimizer step each, clipped per ``grad_clip``), sends the new
weights back to that worker only, and the worker starts on its next batch.
No worker ever waits for another.

With ``workers.num_workers: 0`` the driver's own evaluator computes each
gradient and the learner applies it at once: synchronous A2C with one env
group.
"""

from __future__ import annotations

from typing import Any

from rlgear.config import RunConfig
from rlgear.distributed.async_ops import AsyncGradients
from rlgear.plugins.algorithms.a3c.config import A3CConfig
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.postprocessing import add_gae, trainable_rows
from rlgear.trainer import Trainer


class A3C(Trainer):
    name = "a3c"
    description = "Asynchronous advantage actor-critic (async gradients), discrete and continuous actions"
    config_class = A3CConfig
    policies = {
        "torch": "rlgear.plugins.algorithms.a3c.torch_policy:A3CTorchPolicy",
        "tf": "rlgear.plugins.algorithms.a3c.tf_policy:A3CTFPolicy",
    }
    action_spaces = frozenset({"discrete", "continuous", "multi_discrete", "composite"})
    multi_agent = True  # each worker's gradients per policy: {policy id: gradients}
    recurrent = True
    relational = True  # the catalog actor-critic, whose encoder it is

    @staticmethod
    def postprocess(fragment: SampleBatch, policy: Any, config: RunConfig) -> SampleBatch:
        training = config.training
        return trainable_rows(add_gae(fragment, training.gamma, training.gae_lambda))

    def setup(self, config: RunConfig) -> None:
        super().setup(config)
        self.gradients = AsyncGradients(self.workers, max_requests_in_flight_per_worker=1)
        self._last_stats: dict[str, float] = {}

    def training_step(self) -> dict[str, float]:
        applied = 0
        several = self.workers.local_worker.multi_agent  # gradients arrive as {policy id: gradients}
        for grads, stats, _steps, worker_id in self.gradients.get_ready():
            per_policy = grads.items() if several else [(None, grads)]
            for pid, policy_grads in per_policy:
                policy = self.policy if pid is None else self.policy_map[pid]
                policy.set_global_timestep(self.timesteps_total)  # for lr schedules
                policy.apply_gradients(policy_grads)
            applied += 1
            if worker_id != 0:  # the local evaluator already holds the learner's weights
                self.workers.sync_weights([worker_id])
            self._last_stats = self.learner_stats(stats) if several else stats
        out = dict(self._last_stats)
        if several and len(self.policy_map) > 1:
            for pid in self.policies_to_train:
                policy = self.policy_map[pid]
                out[f"{pid}/num_grad_updates"] = float(policy.num_grad_updates)
                out[f"{pid}/cur_lr"] = float(policy.optimizer.lr)
        else:
            policy = next(iter(self.policy_map.values()))
            out["num_grad_updates"] = float(policy.num_grad_updates)
            out["cur_lr"] = float(policy.optimizer.lr)
        out["gradients_applied_this_step"] = float(applied)
        return out
