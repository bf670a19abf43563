"""training.optimizer by dotted path (torch.optim / Keras), optimizer_kwargs, and the optimizer_epsilon rename."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from rlgear import config as config_mod
from rlgear.config import deprecated
from rlgear.discovery import registry
from rlgear.errors import ConfigError
from rlgear.plugins.backends.torch.optimizers import make_optimizer
from tests.conftest import needs_tf, small_config


def numpy_adamw(param, grads, lr, betas, eps, weight_decay):
    """AdamW (Loshchilov & Hutter 2019) as torch.optim.AdamW documents it, in numpy float64."""
    m, v = np.zeros_like(param), np.zeros_like(param)
    for t, g in enumerate(grads, start=1):
        param = param * (1 - lr * weight_decay)
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat, v_hat = m / (1 - betas[0] ** t), v / (1 - betas[1] ** t)
        param = param - lr * m_hat / (np.sqrt(v_hat) + eps)
    return param


def test_adamw_by_path_matches_a_numpy_reference():
    rng = np.random.default_rng(0)
    start = rng.normal(size=(3, 2)).astype(np.float32)
    grads = [rng.normal(size=(3, 2)).astype(np.float32) for _ in range(3)]
    weight = torch.nn.Parameter(torch.from_numpy(start.copy()))
    kwargs = {"weight_decay": 0.1, "betas": [0.8, 0.99]}
    opt = make_optimizer("torch.optim.AdamW", [weight], 0.05, 1e-5, kwargs)
    for g in grads:
        opt.zero_grad()
        weight.grad = torch.from_numpy(g.copy())
        opt.step()
    expected = numpy_adamw(start.astype(np.float64), grads, 0.05, (0.8, 0.99), 1e-5, 0.1)
    np.testing.assert_allclose(weight.detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    assert opt.steps == 3
    assert opt.inner.param_groups[0]["eps"] == 1e-5  # optimizer_epsilon reached it


def test_lr_assignment_drives_every_param_group():
    weight = torch.nn.Parameter(torch.ones(2))
    opt = make_optimizer("torch.optim.SGD", [weight], 0.1, 1e-5, {"momentum": 0.9})
    opt.lr = 0.01
    assert opt.lr == pytest.approx(0.01)
    weight.grad = torch.ones(2)
    opt.step()
    np.testing.assert_allclose(weight.detach().numpy(), [0.99, 0.99], rtol=1e-6)


def test_state_round_trip_through_safetensors_continues_identically(tmp_path):
    from safetensors.numpy import load_file, save_file

    torch.manual_seed(0)
    a = torch.nn.Linear(4, 3)
    b = torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    opt_a = make_optimizer("torch.optim.AdamW", a.parameters(), 1e-2, 1e-5, {"weight_decay": 0.01})
    opt_b = make_optimizer("torch.optim.AdamW", b.parameters(), 1e-2, 1e-5, {"weight_decay": 0.01})
    x = torch.randn(8, 4)

    def step(model, opt):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    for _ in range(3):
        step(a, opt_a)
    save_file(
        {k: v.detach().numpy().copy() for k, v in opt_a.state_arrays().items()}, tmp_path / "s.safetensors"
    )
    arrays = {k: torch.from_numpy(v) for k, v in load_file(tmp_path / "s.safetensors").items()}
    b.load_state_dict(a.state_dict())
    opt_b.load_state(arrays, opt_a.state_meta())
    assert opt_b.steps == 3
    for _ in range(2):
        step(a, opt_a)
        step(b, opt_b)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


def _trainer(tmp_path, backend="torch", optimizer="torch.optim.AdamW", **training):
    raw = small_config(
        tmp_path,
        backend=backend,
        training={"optimizer": optimizer, "optimizer_kwargs": {"weight_decay": 0.05}, **training},
    )
    config = config_mod.resolve(raw)
    return config, registry.load_algorithm("ppo")(config, logdir=tmp_path / "run")


@pytest.mark.parametrize(
    ("backend", "optimizer"),
    [("torch", "torch.optim.AdamW"), pytest.param("tf", "tf.keras.optimizers.AdamW", marks=needs_tf)],
)
def test_trains_checkpoints_and_follows_the_lr_schedule(tmp_path, backend, optimizer):
    schedule = [[0, 1e-3], [1000, 0.0]]
    config, trainer = _trainer(tmp_path, backend, optimizer, lr_schedule=schedule)
    try:
        before = trainer.policy.get_weights()
        result = trainer.train()
        after = trainer.policy.get_weights()
        assert any(not np.array_equal(before[k], after[k]) for k in before)
        timesteps = trainer.policy.global_timestep
        expected_lr = np.interp(timesteps, [0, 1000], [1e-3, 0.0])
        assert trainer.policy.optimizer.lr == pytest.approx(expected_lr, rel=1e-5)
        assert result["learner/cur_lr"] == pytest.approx(expected_lr, rel=1e-5)
        assert trainer.policy.optimizer.steps > 0
        saved = trainer.save()
        restored = registry.load_algorithm("ppo")(config, logdir=tmp_path / "run")
        try:
            restored.restore(saved)
            assert restored.policy.optimizer.steps == trainer.policy.optimizer.steps
            ours, theirs = trainer.policy.optimizer.state_arrays(), restored.policy.optimizer.state_arrays()
            assert ours.keys() == theirs.keys() and ours
            for key in ours:
                np.testing.assert_array_equal(np.asarray(ours[key]), np.asarray(theirs[key]))
        finally:
            restored.stop()
    finally:
        trainer.stop()


def test_state_of_another_optimizer_is_refused(tmp_path):
    _config, trainer = _trainer(tmp_path)
    try:
        trainer.train()
        state = trainer.policy.get_state()
        other = config_mod.resolve(small_config(tmp_path, training={"optimizer": "adam"}))
        policy = registry.load_algorithm("ppo")(other, logdir=tmp_path / "other")
        try:
            with pytest.raises(ValueError, match=r"torch\.optim\.AdamW"):
                policy.policy.set_state(state)
        finally:
            policy.stop()
    finally:
        trainer.stop()


@pytest.mark.parametrize(
    ("training", "key", "message"),
    [
        ({"optimizer": "adma"}, "training.optimizer", "did you mean 'adam'"),
        ({"optimizer": "torch.optim.AdamX"}, "training.optimizer", "no attribute 'AdamX'"),
        ({"optimizer": "nosuchmodule.Opt"}, "training.optimizer", "cannot import module 'nosuchmodule'"),
        ({"optimizer": "torch.nn.Linear"}, "training.optimizer", "not a torch.optim.Optimizer"),
        ({"optimizer": "tf.keras.optimizers.Adam"}, "training.optimizer", "is a tf optimizer"),
        (
            {"optimizer": "torch.optim.AdamW", "optimizer_kwargs": {"weight_decy": 0.1}},
            "training.optimizer_kwargs.weight_decy",
            "did you mean 'weight_decay'",
        ),
        (
            {"optimizer": "torch.optim.AdamW", "optimizer_kwargs": {"betas": [2.0, 0.9]}},
            "training.optimizer_kwargs",
            "refused them",
        ),
        ({"optimizer": "adam", "optimizer_kwargs": {"lr": 0.1}}, "training.optimizer_kwargs", "training.lr"),
        (
            {"optimizer": "sgd", "optimizer_kwargs": {"momentum": 0.9}},
            "training.optimizer_kwargs.momentum",
            "sgd",
        ),
    ],
)
def test_bad_optimizer_or_kwargs_is_a_config_error_naming_the_key(tmp_path, training, key, message):
    raw = small_config(tmp_path, training=training)
    with pytest.raises(ConfigError) as err:
        config = config_mod.resolve(raw, "my.yaml")
        registry.load_algorithm("ppo")(config, logdir=tmp_path / "run").stop()
    assert str(err.value).startswith(f"my.yaml: {key}: "), str(err.value)
    assert message in str(err.value)


def test_bad_path_through_the_runner_names_the_set(tmp_path):
    import rlgear

    raw = small_config(tmp_path)
    with pytest.raises(
        ConfigError, match=r"^--set training.optimizer=torch.optim.Nope: training.optimizer: "
    ):
        rlgear.train(config_mod.resolve(raw, "c.yaml", ["training.optimizer=torch.optim.Nope"]))


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(deprecated, "_warned", set())


def test_adam_epsilon_still_works_and_warns_once_naming_the_new_key(tmp_path, fresh_warnings):
    raw = small_config(tmp_path, training={"adam_epsilon": 1e-3})
    with pytest.warns(FutureWarning, match=r"training.adam_epsilon .*renamed training.optimizer_epsilon"):
        config = config_mod.resolve(raw)
    assert config.training.optimizer_epsilon == 1e-3
    assert "adam_epsilon" not in config.to_dict()["training"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = config_mod.resolve(raw)  # once per process
    assert again.training.optimizer_epsilon == 1e-3


def test_adam_epsilon_and_optimizer_epsilon_together_is_an_error(tmp_path, fresh_warnings):
    raw = small_config(tmp_path, training={"optimizer_epsilon": 1e-4})
    with pytest.raises(
        ConfigError, match=r"^--set training.adam_epsilon=0.001: training.adam_epsilon: renamed"
    ):
        config_mod.resolve(raw, "c.yaml", ["training.adam_epsilon=0.001"])


def test_adam_epsilon_by_set_blames_the_set_for_a_bad_value(tmp_path, fresh_warnings):
    with pytest.warns(FutureWarning), pytest.raises(ConfigError, match=r"^--set training.adam_epsilon=-1: "):
        config_mod.resolve(small_config(tmp_path), "c.yaml", ["training.adam_epsilon=-1"])


def test_a_run_saved_with_adam_epsilon_resumes(tmp_path, fresh_warnings):
    import yaml

    from rlgear.run.runner import check_resume_config

    config = config_mod.resolve(small_config(tmp_path))
    saved = config.to_dict()
    saved["training"]["adam_epsilon"] = saved["training"].pop("optimizer_epsilon")
    del saved["training"]["optimizer_kwargs"]  # saved before the key existed
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert check_resume_config(config, tmp_path).training.optimizer_epsilon == 1e-5


def test_es_keeps_its_own_adam_epsilon_its_checkpoints_load_and_its_runs_resume(tmp_path, fresh_warnings):
    """ES declares ``training.adam_epsilon`` (its own Adam on the parameter vector): the 0.3 rename
    of the torch/TF optimizers' key must not touch it (it made every ES checkpoint fail to load)."""
    import yaml

    from rlgear.run.runner import check_resume_config

    raw = {"algorithm": "es", "env": {"name": "CartPole-v1"}, "training": {"adam_epsilon": 1e-3}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation warning: the key is ES's own
        config = config_mod.resolve(raw)
    assert config.training.adam_epsilon == 1e-3
    assert "optimizer_epsilon" not in config.to_dict()["training"]
    again = config_mod.resolve(config.to_dict())  # what loading its checkpoint does
    assert again.training.adam_epsilon == 1e-3
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config.to_dict()))
    assert check_resume_config(config, tmp_path).training.adam_epsilon == 1e-3
