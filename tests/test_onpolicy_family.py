"""The on-policy SGD family (``rlgear.plugins.families.onpolicy``) and the backends' side of it.

The schedule must draw exactly the minibatches the 0.2 base classes drew (their loop is
written out here as the reference), so every seeded result stays what it was; a policy that
relied on the 0.2 base class running the loop keeps working for one release, with a warning.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.blocks.minibatch_rows import shuffled_rows
from rlgear.discovery import registry
from rlgear.plugins.families.onpolicy import MinibatchSGD, SGDSchedule
from rlgear.plugins.families.onpolicy.legacy import legacy_schedule
from rlgear.sample_batch import SampleBatch
from rlgear.spaces import Box, Discrete
from rlgear.timestep import StepType, TimeStep
from tests.conftest import HAS_TF, needs_tf

OBS = Box(np.full(4, -np.inf), np.full(4, np.inf))
ACT = Discrete(2)


def minibatches_0_2(rng, num_rows, epochs, minibatch_size, length):
    """The row indices of the 0.2 ``TorchPolicy.learn_on_batch`` loop, as it drew them."""
    padded = length > 1
    units = num_rows // length
    minibatch = minibatch_size or num_rows
    per_minibatch = max(1, round(minibatch / length)) if padded else minibatch
    within = np.arange(length)
    for _ in range(epochs):
        order = rng.permutation(units)
        for start in range(0, units, per_minibatch):
            idx = order[start : start + per_minibatch]
            if padded:
                idx = (idx[:, None] * length + within).reshape(-1)
            yield idx


@pytest.mark.parametrize(
    "num_rows, epochs, minibatch_size, length",
    [
        (64, 10, 64, 1),
        (100, 3, 32, 1),
        (100, 2, None, 1),
        (80, 4, 30, 8),  # 3.75 sequences a minibatch: 4
        (80, 2, 12, 8),  # 1.5: 2 (round half to even)
        (80, 2, 4, 8),  # 0.5 rounds to 0: at least one sequence
        (96, 1, None, 16),
    ],
)
def test_the_schedule_draws_the_minibatches_of_0_2(num_rows, epochs, minibatch_size, length):
    new_rng, old_rng = np.random.default_rng(3), np.random.default_rng(3)
    schedule = SGDSchedule(num_epochs=epochs, minibatch_size=minibatch_size)
    new = list(schedule.minibatches(new_rng, num_rows, length))
    old = list(minibatches_0_2(old_rng, num_rows, epochs, minibatch_size, length))
    assert len(new) == len(old)
    for a, b in zip(new, old, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.int64
    assert new_rng.bit_generator.state == old_rng.bit_generator.state


def test_each_epoch_covers_every_row_once_and_keeps_padded_sequences_whole():
    schedule = SGDSchedule(num_epochs=3, minibatch_size=20)
    steps = list(schedule.minibatches(np.random.default_rng(0), 80, 8))
    per_epoch = len(steps) // 3
    for epoch in range(3):
        rows = np.concatenate(steps[epoch * per_epoch : (epoch + 1) * per_epoch])
        np.testing.assert_array_equal(np.sort(rows), np.arange(80))
    for rows in steps:
        sequences = rows.reshape(-1, 8)
        np.testing.assert_array_equal(sequences, sequences[:, :1] + np.arange(8))
        assert sequences[:, 0].min() % 8 == 0


def test_an_epoch_draws_its_order_when_its_first_minibatch_is_asked_for():
    rng = np.random.default_rng(0)
    steps = SGDSchedule(num_epochs=2).minibatches(rng, 10)
    before = rng.bit_generator.state
    next(steps)
    assert rng.bit_generator.state != before
    after_first = rng.bit_generator.state
    next(steps)
    assert rng.bit_generator.state != after_first


def test_the_one_pass_order_is_one_permutation_of_the_sequences():
    np.testing.assert_array_equal(
        shuffled_rows(np.random.default_rng(1), 12, 3),
        (np.random.default_rng(1).permutation(4)[:, None] * 3 + np.arange(3)).reshape(-1),
    )


@pytest.mark.parametrize("bad", [{"num_epochs": 0}, {"minibatch_size": 0}])
def test_a_schedule_refuses_an_empty_epoch_count_or_minibatch(bad):
    with pytest.raises(ValueError, match="1 or more"):
        SGDSchedule(**bad)


def test_the_legacy_schedule_reads_the_keys_the_0_2_base_class_read():
    class Training:
        num_sgd_iter = 3
        sgd_minibatch_size = None

    assert legacy_schedule(Training()) == SGDSchedule(num_epochs=3, minibatch_size=None)
    assert legacy_schedule(object()) == SGDSchedule()


# ----------------------------------------------------------------------------- policies


def run_config(tmp_path, algorithm="ppo", backend="torch", training=None):
    return config_mod.resolve(
        {
            "algorithm": algorithm,
            "backend": backend,
            "seed": 0,
            "env": {"name": "CartPole-v1"},
            "training": {"train_batch_size": 64, **(training or {})},
            "model": {"hidden_sizes": [16]},
            "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
        }
    )


def ppo_batch(policy, n=64):
    rng = np.random.default_rng(7)
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    timestep = TimeStep(
        step_type=np.full(n, StepType.MID, dtype=np.int32),
        reward=np.zeros(n, np.float32),
        discount=np.ones(n, np.float32),
        observation=obs,
        prev_action=np.zeros(n, np.int64),
        env_id=np.arange(n, dtype=np.int32),
    )
    actions, _, extras = policy.compute_actions(timestep)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.ACTION_LOGP: extras[SampleBatch.ACTION_LOGP],
            SampleBatch.VF_PREDS: extras[SampleBatch.VF_PREDS],
            SampleBatch.ADVANTAGES: rng.normal(size=n).astype(np.float32),
            SampleBatch.VALUE_TARGETS: rng.normal(size=n).astype(np.float32),
        }
    )


def legacy_policy_class(backend):
    """A 0.2-style PPO policy: PPO's loss on the backend's base class, without ``MinibatchSGD``."""
    ppo = registry.load_algorithm("ppo").policy_class(backend)
    if backend == "torch":
        from rlgear.plugins.backends.torch import TorchPolicy

        class LegacyTorchPPO(TorchPolicy):
            loss_columns = ppo.loss_columns
            clip_param = ppo.clip_param
            loss = ppo.loss

        return LegacyTorchPPO

    from rlgear.plugins.backends.tf import TFPolicy, tf

    class LegacyTFPPO(TFPolicy):
        loss_columns = ppo.loss_columns
        clip_param = ppo.clip_param
        loss = ppo.loss

        def __init__(self, observation_space, action_space, config):
            self._clip = tf.Variable(0.0, dtype=tf.float32, trainable=False)
            super().__init__(observation_space, action_space, config)

        def learn_on_batch(self, batch):
            self._clip.assign(self.clip_param())
            return super().learn_on_batch(batch)

    return LegacyTFPPO


@pytest.mark.parametrize("backend", ["torch", pytest.param("tf", marks=needs_tf)])
def test_a_policy_relying_on_the_base_class_epoch_loop_still_runs_it_with_a_warning(tmp_path, backend):
    config = run_config(tmp_path, backend=backend, training={"sgd_minibatch_size": 16, "num_sgd_iter": 3})
    family = registry.load_algorithm("ppo").policy_class(backend)(OBS, ACT, config)
    legacy = legacy_policy_class(backend)(OBS, ACT, config)
    assert not isinstance(legacy, MinibatchSGD)
    legacy.set_weights(family.get_weights())  # torch initialises from its global generator
    batch = ppo_batch(family)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        family_stats = family.learn_on_batch(batch)
    with pytest.warns(DeprecationWarning, match=r"until rlgear 0\.4.*MinibatchSGD, (TorchPolicy|TFPolicy)\)"):
        legacy_stats = legacy.learn_on_batch(batch)
    assert legacy_stats == family_stats
    assert family.num_grad_updates == legacy.num_grad_updates == 3 * 4
    weights = family.get_weights()
    for name, value in legacy.get_weights().items():
        np.testing.assert_array_equal(value, weights[name], err_msg=name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per class
        legacy.learn_on_batch(batch)


@pytest.mark.parametrize("backend", ["torch", pytest.param("tf", marks=needs_tf)])
def test_the_base_class_default_is_one_step_on_the_whole_shuffled_batch(tmp_path, backend):
    config = run_config(tmp_path, algorithm="a3c", backend=backend)
    policy = registry.load_algorithm("a3c").policy_class(backend)(OBS, ACT, config)
    assert not isinstance(policy, MinibatchSGD)
    batch = ppo_batch(policy)
    expected_rng = np.random.default_rng(0)
    expected_rng.permutation(len(batch))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy.learn_on_batch(batch)
    assert policy.num_grad_updates == 1
    assert policy.rng.bit_generator.state == expected_rng.bit_generator.state


def test_a_minibatch_sgd_policy_needs_a_config_that_declares_its_schedule(tmp_path):
    from rlgear.plugins.backends.torch import TorchPolicy

    class NoSchedule(MinibatchSGD, TorchPolicy):
        pass

    config = run_config(tmp_path, algorithm="a3c")
    with pytest.raises(TypeError, match=r"A3CConfig has no sgd_schedule\(\) method"):
        NoSchedule(OBS, ACT, config)


@pytest.mark.parametrize("algorithm", ["ppo", "pg", "a2c", "impala", "appo"])
def test_the_on_policy_algorithms_learn_through_the_family(algorithm):
    trainer = registry.load_algorithm(algorithm)
    for backend in ("torch", "tf") if HAS_TF else ("torch",):
        assert issubclass(trainer.policy_class(backend), MinibatchSGD)
    assert isinstance(trainer.config_class().sgd_schedule(), SGDSchedule)
