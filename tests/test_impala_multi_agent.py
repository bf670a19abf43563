"""IMPALA on multi-agent envs: per-agent streams padded to the fragment's length, V-trace per agent.

Each agent's stream of a fragment is compacted by the multi-agent sampler, so its length varies
(an agent that joins late or finishes early has fewer rows). IMPALA pads it at its end to the
fragment's ``T+1`` rows (``pad_agent_stream``). The reference here never pads: it runs the
paper's V-trace (``tests/test_vtrace.py``'s explicit sums) along each real stream of its own
length, pools the learned rows of all streams, and the backends' loss, statistics and update on
the padded sequences must equal it. Learning tests are ``slow`` (times in their docstrings).
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.discovery import registry
from rlgear.plugins.algorithms.impala.impala import IMPALA
from rlgear.sample_batch import SampleBatch as SB
from rlgear.sampling.rollout_worker import RolloutWorker
from rlgear.timestep import StepType
from tests.conftest import BACKENDS
from tests.numpy_reference import (
    CARTPOLE_ACT,
    CARTPOLE_OBS,
    actor_critic,
    assert_update_is_sgd_on,
    finite_difference_gradient,
    global_norm,
    logp_and_entropy,
    make_policy,
    random_weights,
    resolve,
    sgd_step,
)
from tests.test_multi_agent import MATCH_OPTIMUM, independent, ma_config
from tests.test_vtrace import reference_vtrace

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
ROWS = 8  # T+1 of a fragment of 7 env steps
STAT_RTOL, STAT_ATOL = 1e-4, 1e-5

pytestmark = pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")


def agent_streams(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    """Real agent streams of one fragment, of lengths 8 (the whole fragment), 5, 3 and 2.

    Their step types hold a terminated end (discount 0) and a truncated one (discount 1) inside,
    a late join (FIRST after the fragment start) and streams whose last row, the bootstrap, is a
    MID: the rows whose V-trace a careless padding would change.
    """
    kinds = [
        [MID, MID, LAST, FIRST, MID, MID, MID, MID],  # whole fragment; terminated inside
        [FIRST, MID, MID, MID, MID],  # joined late, still acting at the cut
        [MID, MID, LAST],  # finished early (truncated)
        [FIRST, MID],  # joined at the end of the fragment
    ]
    truncated = {2}
    streams = []
    for index, kind in enumerate(kinds):
        kind = np.array(kind, np.int32)
        n = len(kind)
        rewards = np.where(kind == FIRST, 0.0, rng.normal(size=n))
        discounts = np.where(kind == LAST, 1.0 if index in truncated else 0.0, 1.0)
        streams.append(
            {
                SB.OBS: rng.normal(size=(n, CARTPOLE_OBS.size)).astype(np.float32),
                SB.ACTIONS: rng.integers(CARTPOLE_ACT.n, size=n).astype(np.int64),
                SB.REWARDS: rewards.astype(np.float32),
                SB.DISCOUNTS: discounts.astype(np.float32),
                SB.STEP_TYPES: kind,
            }
        )
    return streams


def with_behaviour_logp(streams, weights, rng) -> None:
    """Behaviour log-probabilities off from the current policy's by -1.2..1.2 (clips bite)."""
    for stream in streams:
        logp, _, _ = forward(weights, stream)
        stream[SB.ACTION_LOGP] = (logp + rng.uniform(-1.2, 1.2, size=logp.shape)).astype(np.float32)


def forward(weights, stream):
    dist_inputs, values = actor_critic(weights, stream[SB.OBS])
    logp, entropy = logp_and_entropy(dist_inputs, stream[SB.ACTIONS], False)
    return logp, entropy, values


def reference(weights, streams, training, targets):
    """The loss pooled over every stream's learned rows (neither LAST nor its bootstrap row)."""
    policy_terms, vf_terms, entropies, rhos_learned = [], [], [], []
    for stream, (vs, pg, rhos) in zip(streams, targets, strict=True):
        logp, entropy, values = forward(weights, stream)
        learned = stream[SB.STEP_TYPES][:-1] != LAST
        policy_terms.append(-(logp[:-1] * pg)[learned])
        vf_terms.append((0.5 * (values[:-1] - vs) ** 2)[learned])
        entropies.append(entropy[:-1][learned])
        rhos_learned.append(rhos[learned])
    count = sum(len(t) for t in policy_terms)
    policy_loss = np.concatenate(policy_terms).sum() / count
    vf_loss = np.concatenate(vf_terms).sum() / count
    mean_entropy = np.concatenate(entropies).sum() / count
    loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * mean_entropy
    stats = {
        "policy_loss": policy_loss,
        "vf_loss": vf_loss,
        "entropy": mean_entropy,
        "mean_rho": np.concatenate(rhos_learned).mean(),
        "total_loss": loss,
    }
    return loss, stats


def vtrace_targets(weights, streams, training):
    """Per real stream, of its own length: ``(vs, pg_advantages, rhos)`` from the paper's sums."""
    out = []
    for stream in streams:
        logp, _, values = forward(weights, stream)
        log_rhos = logp - stream[SB.ACTION_LOGP]
        vs, pg = reference_vtrace(
            log_rhos, stream[SB.REWARDS].astype(np.float64), values, stream[SB.STEP_TYPES],
            stream[SB.DISCOUNTS].astype(np.float64) * training.gamma,
            training.vtrace_clip_rho_threshold, training.vtrace_clip_pg_rho_threshold,
            training.vtrace_clip_c_threshold, training.vtrace_lambda,
        )  # fmt: skip
        out.append((np.asarray(vs), np.asarray(pg), np.exp(log_rhos[:-1])))
    return out


def padded_sequences(streams, config) -> SB:
    """What the sampler hands IMPALA's postprocessing: each group of equal-length streams ``[n, k]``."""
    pieces = [
        IMPALA.postprocess(SB({key: values[:, None] for key, values in stream.items()}), None, config)
        for stream in streams
    ]
    return SB.concat(pieces)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "training", [{}, {"vtrace_lambda": 0.8, "gamma": 0.9, "vtrace_clip_c_threshold": 0.7}]
)
def test_padded_agent_streams_learn_as_the_numpy_reference_on_the_real_streams(tmp_path, backend, training):
    config = resolve(
        tmp_path,
        "impala",
        {
            "optimizer": "sgd",
            "lr": 0.3,
            "grad_clip": None,
            "entropy_coeff": 0.03,
            "vf_loss_coeff": 0.7,
            **training,
        },
        backend=backend,
    )
    config.workers.rollout_fragment_length = ROWS - 1
    policy = make_policy(config, backend, CARTPOLE_OBS, CARTPOLE_ACT)
    policy.set_weights(random_weights(policy.get_weights(), gain=1.5))
    weights = policy.get_weights()
    rng = np.random.default_rng(4)
    streams = agent_streams(rng)
    with_behaviour_logp(streams, weights, rng)
    batch = padded_sequences(streams, config)
    assert batch[SB.OBS].shape == (len(streams), ROWS, CARTPOLE_OBS.size)
    for key in (SB.REWARDS, SB.DISCOUNTS, SB.ACTION_LOGP):  # the real rows are passed on unchanged
        for i, stream in enumerate(streams):
            np.testing.assert_array_equal(batch[key][i, : len(stream[key])], stream[key])
    training_cfg = config.training
    targets = vtrace_targets(weights, streams, training_cfg)
    _, expected = reference(weights, streams, training_cfg, targets)
    grads = finite_difference_gradient(lambda w: reference(w, streams, training_cfg, targets)[0], weights)
    stats, update = sgd_step(policy, batch)
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, rel=STAT_RTOL, abs=STAT_ATOL), key
    assert stats["grad_gnorm"] == pytest.approx(global_norm(grads), rel=1e-3)
    assert_update_is_sgd_on(update, grads, training_cfg.lr, None)


def test_padding_keeps_a_whole_fragment_stream_unchanged_and_the_padding_finite(tmp_path):
    config = resolve(tmp_path, "impala")
    config.workers.rollout_fragment_length = ROWS - 1
    streams = agent_streams(np.random.default_rng(0))
    for stream in streams:
        stream[SB.ACTION_LOGP] = np.full(len(stream[SB.STEP_TYPES]), -0.5, np.float32)
    batch = padded_sequences(streams, config)
    np.testing.assert_array_equal(batch[SB.STEP_TYPES][0], streams[0][SB.STEP_TYPES])  # no padding
    short = streams[3]  # [FIRST, MID] -> FIRST, then its bootstrap and six padding rows, all LAST
    assert list(batch[SB.STEP_TYPES][3]) == [FIRST] + [LAST] * (ROWS - 1)
    assert not batch[SB.REWARDS][3, 2:].any() and not batch[SB.DISCOUNTS][3, 2:].any()
    np.testing.assert_array_equal(batch[SB.OBS][3, 2:], np.repeat(short[SB.OBS][-1:], ROWS - 2, axis=0))
    assert np.isfinite(batch[SB.ACTION_LOGP]).all()


def impala_config(env="make_late_join", **sections):
    raw = ma_config(env, **sections)
    raw["algorithm"] = "impala"
    raw["training"] = {"train_batch_size": 32, **sections.get("training", {})}
    return raw


def test_the_sampler_gives_fixed_length_sequences_of_one_agent_each():
    """On the late-join env a (3 steps) and b (4 steps) have streams of different lengths in one
    fragment; every sequence is ``[T+1]`` long and holds one agent's observations only."""
    from rlgear import config as config_mod

    config = config_mod.resolve(
        impala_config(workers={"num_envs_per_worker": 2, "rollout_fragment_length": 4}),
        training_class=IMPALA.config_class,
    )
    evaluator = RolloutWorker(
        config, IMPALA.policy_class("torch"), registry.load_env_adapter("vector"), IMPALA.postprocess
    )
    try:
        lengths = set()
        for _ in range(4):
            batch, _ = evaluator.sample_with_count()
            rows = batch["default"]
            assert rows[SB.STEP_TYPES].shape[1] == 5
            agent = rows[SB.OBS][:, :, 1]  # the env puts the agent's index in the observation
            assert (agent == agent[:, :1]).all(), "a sequence crossed agents"
            # real rows: up to and including the first row marked LAST after the padding starts
            for steps in rows[SB.STEP_TYPES]:
                tail = len(steps)
                while tail > 1 and steps[tail - 1] == LAST and steps[tail - 2] == LAST:
                    tail -= 1
                lengths.add(tail)
    finally:
        evaluator.stop()
    assert len(lengths) > 1  # streams of different lengths were padded to one


@pytest.mark.parametrize("backend", BACKENDS)
def test_impala_trains_each_policy_on_its_own_agents(backend):
    if backend == "tf":
        pytest.importorskip("tensorflow")
    raw = impala_config("make_match", multiagent=independent(policies_to_train=["pb"]), backend=backend)
    trainer = registry.load_algorithm("impala")(raw)
    try:
        before = trainer.policy_map["pa"].get_weights()
        b_before = trainer.policy_map["pb"].get_weights()
        result = trainer.train()
        assert result["learner/num_learner_updates"] >= 1
        assert np.isfinite(result["learner/pb/total_loss"])
        assert not any(k.startswith("learner/pa/") for k in result)
        for key, value in before.items():
            np.testing.assert_array_equal(trainer.policy_map["pa"].get_weights()[key], value)
        assert any(
            not np.array_equal(trainer.policy_map["pb"].get_weights()[k], v) for k, v in b_before.items()
        )
    finally:
        trainer.stop()


@pytest.mark.slow
def test_impala_remote_workers_sample_multi_agent_fragments(ray_session):
    """About 20 s: two Ray workers on the late-join env; the learner takes their padded sequences."""
    raw = impala_config(workers={"num_workers": 2, "num_envs_per_worker": 2, "rollout_fragment_length": 8})
    trainer = registry.load_algorithm("impala")(raw)
    try:
        for _ in range(5):
            result = trainer.train()
        assert result["learner/num_learner_updates"] >= 1
        assert result["agent_timesteps_total"] > 0
        assert np.isfinite(result["learner/total_loss"])
    finally:
        trainer.stop()


@pytest.mark.slow
def test_impala_with_a_shared_policy_reaches_95_percent_of_the_optimum():
    """About 5 s (seed 1 reaches it at 10.7k env steps; budget 20k)."""
    raw = impala_config(
        "make_match",
        workers={"num_envs_per_worker": 8, "rollout_fragment_length": 32},
        training={"train_batch_size": 256, "lr": 5e-3, "entropy_coeff": 0.01},
        model={"hidden_sizes": [64, 64]},
        seed=1,
    )
    trainer = registry.load_algorithm("impala")(raw)
    try:
        best = -np.inf
        while trainer.timesteps_total < 20_000 and best < 0.95 * MATCH_OPTIMUM:
            result = trainer.train()
            best = max(best, result["episode_return_mean"] or -np.inf)
    finally:
        trainer.stop()
    assert best >= 0.95 * MATCH_OPTIMUM, result
