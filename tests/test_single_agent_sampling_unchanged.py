"""A single-agent run samples exactly what it sampled before it became the one-agent case of the sampler.

The single-agent evaluator used to record fragments and episodes in a loop of its own; since issue 13
it goes through :class:`~rlgear.sampling.sampler.Sampler` as one agent, one policy,
every slot always active. The digests below were computed with the OLD code (commit 5ea809b, before
that change) by :func:`sampled_digest`, so these tests fail if the shared sampler changes a single
sampled, postprocessed or counted value of a seeded single-agent run: fragments with the observation
filter, whole episodes (``complete_episodes``) and an LSTM policy's per-slot state.

The feed-forward digests were pinned again when the numpy twin moved from inverse-CDF sampling
with per-step log-probabilities to Gumbel-max sampling on block-drawn noise, with the
log-probabilities computed per fragment (``Policy.finish_fragment``): a new random stream, the same
distribution. That commit was checked first with the inverse-CDF sampling put back: all three
5ea809b digests still matched, so nothing but the random stream changed. The LSTM twin still samples
by inverse CDF: its digest is 5ea809b's.

Floats are rounded to 2 decimals before hashing, so that another BLAS (CI) giving a different last bit
of a matmul does not change the digest; every sampled action, step type, episode id and count is exact.
They were rounded to 4 decimals until the digests were pinned again at commit bc4ec55 (the code before
the Learner and the regrouped core, run on a machine whose float32 results differ in the last bit from
the one that pinned them: at 4 decimals, one of several thousand values crossing a rounding boundary
changed the ``complete_episodes`` digest, with every action and episode the same).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.discovery import registry
from rlgear.plugins.algorithms.ppo import PPO
from rlgear.sampling.rollout_worker import RolloutWorker
from tests.conftest import small_config

CASES = {
    "fragments_with_filter": {
        "workers": {"num_envs_per_worker": 3, "rollout_fragment_length": 40},
        "model": {"observation_filter": "mean_std"},
    },
    "complete_episodes": {
        "workers": {
            "num_envs_per_worker": 3,
            "rollout_fragment_length": 30,
            "batch_mode": "complete_episodes",
        },
    },
    "lstm": {
        "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 25},
        "model": {"lstm": True, "lstm_cell_size": 8, "max_seq_len": 10},
    },
}

#: sha256 digests of :func:`sampled_digest`, computed with commit bc4ec55's code (see the module docstring).
OLD_DIGESTS = {
    "fragments_with_filter": "1638bde95cac7b8840b73c0762e35294056b240cc05f24788c00010801016582",
    "complete_episodes": "a6cc3e67071aa245aef76d3cf2c90f9eb76bf99a6af9753a4e30a05a82f17de2",
    "lstm": "985132b7914701b77a7a092ffdb6b1eed786bbe58addf52c5e826e6305f27e60",
}


def _update(digest, value) -> None:
    value = np.asarray(value)
    if value.dtype.kind == "f":
        value = np.round(value.astype(np.float64), 2) + 0.0  # + 0.0: -0.0 and 0.0 hash alike
    digest.update(f"{value.dtype.str}{value.shape}".encode())
    digest.update(np.ascontiguousarray(value).tobytes())


def sampled_digest(tmp_path, case: str, samples: int = 4) -> str:
    """sha256 over ``samples`` postprocessed batches of a seeded PPO CartPole evaluator, every column,
    and the episodes and env steps it reported."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    torch.manual_seed(0)  # what the Trainer's backend setup does: the policy's weights and sampling
    # sync envs, as the digests were made with (env.vectorization's default was sync then; native
    # CartPole draws other random streams)
    config = config_mod.resolve(small_config(tmp_path, env={"vectorization": "sync"}, **CASES[case]))
    evaluator = RolloutWorker(
        config, PPO.policy_class("torch"), registry.load_env_adapter("gymnasium"), PPO.postprocess
    )
    digest = hashlib.sha256()
    try:
        for _ in range(samples):
            batch, steps = evaluator.sample_with_count()
            digest.update(str(steps).encode())
            for key in sorted(batch.keys()):
                digest.update(key.encode())
                _update(digest, batch[key])
        metrics = evaluator.pop_metrics()
    finally:
        evaluator.stop()
    digest.update(str(metrics["env_steps"]).encode())
    for episode in metrics["episodes"]:
        digest.update(repr(sorted((k, v) for k, v in episode.items() if k != "time")).encode())
    return digest.hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_seeded_single_agent_run_samples_what_the_old_loop_sampled(tmp_path, case):
    assert sampled_digest(tmp_path, case) == OLD_DIGESTS[case]


if __name__ == "__main__":  # print the digests of the code in place (how OLD_DIGESTS were made)
    import tempfile
    from pathlib import Path

    for name in sorted(CASES):
        print(name, sampled_digest(Path(tempfile.mkdtemp()), name))
