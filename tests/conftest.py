"""Shared fixtures: small configs that train in a fraction of a second."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

# Hooks registered by other installed packages must not change what the tests measure.
os.environ.setdefault("RLGEAR_DISABLE_PLUGIN_AUTOLOAD", "1")
# Ray workers at the test process's priority, as rlgear's own init_ray starts them, also for the
# tests that start a ray.cluster_utils.Cluster: Ray's default niceness of 15 lets the other xdist
# process starve them.
os.environ.setdefault("RAY_worker_niceness", "0")


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it (TensorFlow takes 3 s)."""
    return importlib.util.find_spec(module) is not None


# Extras: a test that needs one is skipped, with this reason, where it is not installed
# (`pytest -m "not slow"` passes with only `.[torch,test]`); everything else still runs.
HAS_TF, HAS_RAY, HAS_MATPLOTLIB = installed("tensorflow"), installed("ray"), installed("matplotlib")
needs_tf = pytest.mark.skipif(not HAS_TF, reason="needs TensorFlow: pip install 'rlgear[tf]'")
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="needs Ray: pip install 'rlgear[ray]'")
needs_matplotlib = pytest.mark.skipif(
    not HAS_MATPLOTLIB, reason="needs matplotlib: pip install 'rlgear[plot]'"
)


def start_local_ray(num_cpus: int = 2) -> None:
    """Start this module's local Ray, or skip the test that asked for it when Ray is not installed.

    Called from a module's ``ray_session`` fixture, so only the tests that use
    Ray are skipped; the module's other tests still run.
    """
    if not HAS_RAY:
        pytest.skip("needs Ray: pip install 'rlgear[ray]'")
    from rlgear.distributed.ray_session import init_ray

    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        init_ray(num_cpus=num_cpus)
    except Exception as err:  # Ray waits a fixed 30 s for its raylet: a loaded machine can miss it once
        if "timed out during startup" not in str(err):
            raise
        from rlgear.distributed.ray_session import shutdown_ray

        shutdown_ray(force=True)
        init_ray(num_cpus=num_cpus)


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray of 2 CPUs for the module that asks for it; its tests are skipped without Ray."""
    start_local_ray(num_cpus=2)
    yield
    from rlgear.distributed.ray_session import shutdown_ray

    shutdown_ray(force=True)


@pytest.fixture
def serve():
    """``serve(**settings)``: a live external-env server stepped in a thread; stopped after the test."""
    from tests.test_external_server import Stepper, make_env

    steppers = []

    def start(**settings):
        stepper = Stepper(make_env(**settings))
        steppers.append(stepper)
        return stepper

    yield start
    for stepper in steppers:
        stepper.stop()


#: ``@pytest.mark.parametrize("backend", BACKENDS)``: the tf case is skipped without TensorFlow.
BACKENDS = ["torch", pytest.param("tf", marks=needs_tf)]


def small_config(tmp_path, **sections):
    """A tiny PPO CartPole config as a raw mapping; ``sections`` replace or extend keys."""
    config = {
        "algorithm": "ppo",
        "seed": 0,
        "env": {"name": "CartPole-v1"},
        # Ray workers import torch before they answer: 90-110 s seen on a loaded 2-core machine, close to
        # the 120 s default that is meant for real clusters (tests of the timeout itself set their own)
        "workers": {"num_envs_per_worker": 2, "ray": {"worker_start_timeout_s": 600.0}},
        "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
        "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


@pytest.fixture
def tiny_config(tmp_path):
    return small_config(tmp_path)


CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def train_until_stop(trainer_cls: type, config_name: str, *overrides: str) -> dict[str, Any]:
    """Train a tuned config from ``configs/`` in-process (no run folder) until its stop criterion."""
    from rlgear import config as config_mod
    from rlgear.run.runner import should_stop

    config = config_mod.load(
        CONFIGS / config_name,
        [
            "logging.tensorboard=false",
            "logging.progress=none",
            "workers.ray.worker_start_timeout_s=600",  # see small_config
            *overrides,
        ],
        training_class=trainer_cls.config_class,
    )
    assert config.stop, "a learning test needs a stop criterion"
    trainer = trainer_cls(config)
    try:
        while True:
            result = trainer.train()
            if should_stop(result, config.stop):
                return result
    finally:
        trainer.stop()


#: Fixtures that start (or attach to) a Ray cluster. Tests that use one run on the same
#: pytest-xdist worker, one after the other (``--dist loadgroup``): two Ray clusters side by
#: side on a 2-core machine starve each other's actors, and a module's session is shared.
RAY_FIXTURES = frozenset({"ray_session", "cluster"})


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns the marks into scheduling groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if RAY_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("ray"))


def pytest_runtest_setup(item):
    """Refuse to run a Ray test that xdist did not group (a pytest or xdist upgrade can break
    ``--dist loadgroup`` silently: pytest 9 with xdist 3.8 did), rather than let Ray clusters
    run side by side and fail on timing."""
    grouped_run = os.environ.get("PYTEST_XDIST_WORKER") and getattr(item.config.option, "loadgroup", False)
    if grouped_run and RAY_FIXTURES.intersection(item.fixturenames) and not item.nodeid.endswith("@ray"):
        pytest.fail(
            f"{item.nodeid} uses Ray but xdist did not put it in the 'ray' group: "
            "check the pytest / pytest-xdist versions (setup.cfg's test extra)"
        )
