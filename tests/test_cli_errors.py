"""User errors at the command line: one line, exit status 2, no traceback, no run folder.

Each case runs ``python -m rlgear ...`` in a subprocess, as a user would, and
checks the contract of ``rlgear.cli``: an error that is the user's to fix
prints exactly one line ``rlgear: error: ...`` on stderr that says where (file,
``--set``, folder) and what (key path, name), exits with status 2, shows no
traceback, and leaves nothing behind under ``logging.dir``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rlgear

CONFIGS = Path(__file__).resolve().parent.parent / "configs"

VALID = "algorithm: ppo\nenv:\n  name: CartPole-v1\n"


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RLGEAR_DISABLE_PLUGIN_AUTOLOAD"}
    env["RLGEAR_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only rlgear's own plugins matter here
    return subprocess.run(
        [sys.executable, "-m", "rlgear", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def folder(path: Path) -> Path:
    path.mkdir()
    return path


def train(tmp_path: Path, text: str | None, *extra: str) -> list[str]:
    path = config_file(tmp_path, text) if text is not None else tmp_path / "missing.yaml"
    return ["train", str(path), "--set", f"logging.dir={tmp_path / 'runs'}", *extra]


# case name -> (command line, texts its error line must contain), built in a temp folder
CASES = {
    "unknown-algorithm": lambda p: (
        train(p, "algorithm: ppoo\nenv: {name: CartPole-v1}\n"),
        ["unknown algorithm 'ppoo'", "did you mean 'ppo'", "installed algorithms: ", "ppo"],
    ),
    "unknown-key": lambda p: (
        train(p, VALID + "training:\n  lrr: 0.001\n"),
        [f"{p / 'run.yaml'}: training.lrr: unknown key", "did you mean 'lr'"],
    ),
    "unknown-top-level-key": lambda p: (
        train(p, VALID + "trainig:\n  lr: 0.001\n"),
        [f"{p / 'run.yaml'}: trainig: unknown key", "did you mean 'training'"],
    ),
    "wrong-type": lambda p: (
        train(p, VALID + "training:\n  lr: fast\n"),
        [f"{p / 'run.yaml'}: training.lr: expected a number, got 'fast' (str)"],
    ),
    "wrong-choice": lambda p: (
        train(p, VALID + "workers:\n  batch_mode: complete_episode\n"),
        [f"{p / 'run.yaml'}: workers.batch_mode:", "did you mean 'complete_episodes'"],
    ),
    "missing-env-name": lambda p: (
        train(p, "algorithm: ppo\nenv:\n  adapter: gymnasium\n"),
        [f"{p / 'run.yaml'}: env.name: missing required key"],
    ),
    "malformed-yaml": lambda p: (
        train(p, "algorithm: ppo\nenv: {name: CartPole-v1}\ntraining:\n  lr: 0.1\n   gamma: 0.9\n"),
        [f"{p / 'run.yaml'}:5:9: malformed YAML"],
    ),
    "not-a-mapping": lambda p: (
        train(p, "- algorithm: ppo\n"),
        [f"{p / 'run.yaml'}: expected a mapping of config keys, got list"],
    ),
    "missing-config-file": lambda p: (
        train(p, None),
        [f"{p / 'missing.yaml'}: no such config file"],
    ),
    "search-space-in-train": lambda p: (
        train(p, VALID + "training:\n  lr: {grid_search: [0.001, 0.0001]}\n"),
        [f"{p / 'run.yaml'}: training.lr:", "rlgear tune"],
    ),
    "out-of-range": lambda p: (
        train(p, VALID + "workers:\n  num_envs_per_worker: 0\n"),
        [f"{p / 'run.yaml'}: workers.num_envs_per_worker: expected a positive number, got 0"],
    ),
    "unknown-stop-key": lambda p: (
        train(p, VALID + "stop:\n  timestep_total: 1000\n"),
        [f"{p / 'run.yaml'}: stop.timestep_total: not a result key", "did you mean 'timesteps_total'"],
    ),
    "unknown-set-key": lambda p: (
        train(p, VALID, "--set", "training.lrr=0.1"),
        ["--set training.lrr=0.1: training.lrr: unknown key", "did you mean 'lr'"],
    ),
    "wrong-type-set": lambda p: (
        train(p, VALID + "training:\n  lr: 0.1\n", "--set", "training.lr=fast"),
        ["--set training.lr=fast: training.lr: expected a number, got 'fast' (str)"],
    ),
    "malformed-set": lambda p: (
        train(p, VALID, "--set", "training.lr"),
        ["--set training.lr: expected KEY.PATH=VALUE"],
    ),
    "unknown-stop-key-set": lambda p: (
        train(p, VALID, "--set", "stop.timestep_total=1000"),
        ["--set stop.timestep_total=1000: stop.timestep_total: not a result key"],
    ),
    "wrapper-breaks-the-env-set": lambda p: (
        train(
            p,
            VALID,
            "--set",
            "env.wrappers=[{name: gymnasium.wrappers.TransformReward, kwargs: {func: null}}]",
        ),
        [
            "--set env.wrappers=[{name: gymnasium.wrappers.TransformReward, kwargs: {func: null}}]: "
            "env.wrappers[0]: TransformReward(func=None) breaks the env's first step",
        ],
    ),
    "unsupported-backend": lambda p: (
        train(p, VALID + "backend: jax\n"),
        ["algorithm 'ppo' does not support backend 'jax'", "supported: tf, torch"],
    ),
    "resume-not-a-run": lambda p: (
        train(p, VALID, "--resume", str(folder(p / "not-a-run"))),
        [f"--resume {p / 'not-a-run'}: not a run folder"],
    ),
    "resume-missing-folder": lambda p: (
        train(p, VALID, "--resume", str(p / "no-such-run")),
        [f"{p / 'no-such-run'}"],
    ),
    "evaluate-missing-path": lambda p: (
        ["evaluate", str(p / "no-such-checkpoint")],
        [f"{p / 'no-such-checkpoint'}: no such checkpoint or run folder"],
    ),
    "evaluate-folder-without-checkpoint": lambda p: (
        ["evaluate", str(folder(p / "empty"))],
        [f"{p / 'empty'}: no complete checkpoint found here"],
    ),
    "learners-device-not-a-device": lambda p: (
        train(p, VALID, "--set", "learners.device=gpu"),
        ["--set learners.device=gpu: learners.device: expected auto, cpu, cuda, cuda:N or mps, got 'gpu'"],
    ),
    "learners-several-on-tf": lambda p: (
        train(p, VALID + "backend: tf\nlearners: {num_learners: 2}\n"),
        [f"{p / 'run.yaml'}: learners.num_learners: backend 'tf' has no data-parallel learners (got 2)"],
    ),
    "learners-on-a-framework-free-algorithm": lambda p: (
        train(p, "algorithm: es\nenv: {name: CartPole-v1}\nlearners: {num_learners: 1}\n"),
        ["learners.num_learners: algorithm 'es' has a framework-free policy that learns in the driver"],
    ),
    "learners-cuda-actors-without-gpus": lambda p: (
        train(p, VALID + "learners: {num_learners: 2, device: cuda}\n"),
        ["learners.num_gpus_per_learner: learners.device is 'cuda', but a learner actor sees only the GPUs"],
    ),
    "learners-more-gpus-than-the-cluster": lambda p: (
        train(p, VALID + "learners: {num_learners: 2, num_gpus_per_learner: 1}\n"),
        ["learners: asked for 2 learners x 1 GPU, the cluster has 0 GPUs", "learners.num_gpus_per_learner"],
    ),
    "gsde-on-discrete-actions": lambda p: (
        train(p, VALID + "training:\n  use_sde: true\n"),
        [
            f"{p / 'run.yaml'}: training.use_sde: gSDE needs Box actions, but env 'CartPole-v1' has "
            "Discrete(n=2): set it to false"
        ],
    ),
    "gsde-on-discrete-sac": lambda p: (
        train(p, "algorithm: sac\nenv:\n  name: CartPole-v1\ntraining:\n  use_sde: true\n"),
        [f"{p / 'run.yaml'}: training.use_sde: gSDE needs Box actions, but env 'CartPole-v1' has Discrete"],
    ),
    "icm-on-box-actions": lambda p: (
        train(p, "algorithm: ppo\nenv:\n  name: Pendulum-v1\nexploration:\n  name: icm\n"),
        [
            f"{p / 'run.yaml'}: exploration.name: exploration 'icm' needs Discrete actions (its inverse "
            "model classifies the action), got Box"
        ],
    ),
    "evaluate-zero-episodes": lambda p: (
        ["evaluate", str(p), "--episodes", "0"],
        ["--episodes: expected a positive number, got 0"],
    ),
}


# Cases whose check sits behind an extra: without it, the run stops earlier on a different (also
# one-line) error that names the missing extra, so the case's own message cannot be reached.
NEEDS = {
    "learners-several-on-tf": ("tensorflow", "needs TensorFlow: pip install 'rlgear[tf]'"),
    "learners-more-gpus-than-the-cluster": ("ray", "needs Ray: pip install 'rlgear[ray]'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_user_error_is_one_line_with_exit_status_2_and_no_traceback(case, tmp_path):
    if case in NEEDS:
        module, reason = NEEDS[case]
        if importlib.util.find_spec(module) is None:
            pytest.skip(reason)
    args, expected = CASES[case](tmp_path)
    out = run_cli(*args)
    assert "Traceback" not in out.stdout + out.stderr, out.stderr[-3000:]
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    (line,) = lines
    assert line.startswith("rlgear: error: ")
    for text in expected:
        assert text in line
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_debug_flag_shows_the_traceback_of_a_user_error(tmp_path):
    out = run_cli("--debug", "train", str(tmp_path / "missing.yaml"))
    assert out.returncode != 0
    assert "Traceback" in out.stderr
    assert "ConfigError" in out.stderr
    assert "no such config file" in out.stderr


def test_version_prints_the_package_version():
    out = run_cli("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"rlgear {rlgear.__version__}"


def test_help_lists_the_commands():
    out = run_cli("--help")
    assert out.returncode == 0
    for command in ("train", "evaluate", "plugins"):
        assert command in out.stdout
    assert out.stderr == ""


def test_train_help_documents_set_and_resume():
    out = run_cli("train", "--help")
    assert out.returncode == 0
    assert "--set" in out.stdout and "KEY.PATH=VALUE" in out.stdout
    assert "--resume" in out.stdout


def test_no_command_shows_usage_and_exits_with_status_2():
    out = run_cli()
    assert out.returncode == 2
    assert "usage: rlgear" in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_unknown_command_is_a_usage_error():
    out = run_cli("trian", "run.yaml")
    assert out.returncode == 2
    assert "invalid choice: 'trian'" in out.stderr
    assert "Traceback" not in out.stderr


def test_set_of_an_unknown_env_adapter_names_the_set_and_the_key(capsys):
    from rlgear.cli import main

    assert main(["train", str(CONFIGS / "ppo-cartpole.yaml"), "--set", "env.adapter=gymnasum"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "rlgear: error: --set env.adapter=gymnasum: env.adapter: unknown env adapter 'gymnasum'"
    )
    assert "did you mean 'gymnasium'" in err


def test_errors_from_plugin_code_carry_the_config_path_prefix(capsys):
    from rlgear.cli import main

    assert main(["train", str(CONFIGS / "ppo-cartpole.yaml"), "--set", "env.kwargs.nonsense=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "rlgear: error: --set env.kwargs.nonsense=1: env.kwargs: CartPole-v1 does not accept"
    )


def test_run_config_fail_is_the_helper_plugin_code_uses_for_its_keys(tmp_path):
    from rlgear import config as config_mod

    config = config_mod.load(CONFIGS / "ppo-cartpole.yaml", ["env.kwargs.size=3"])
    assert (
        str(config.fail("env.kwargs.size", "expected > 3"))
        == "--set env.kwargs.size=3: env.kwargs.size: expected > 3"
    )
    assert str(config.fail("model.hidden_sizes", "bad")).endswith(
        "ppo-cartpole.yaml: model.hidden_sizes: bad"
    )


# An algorithm plugin whose setup() checks two keys together and refuses with config.fail.
PICKY_ENTRY_POINTS = "[rlgear.algorithms]\npicky = picky_mod:Picky\n"
PICKY_MODULE = """\
from rlgear.plugins.algorithms.ppo import PPO


class Picky(PPO):
    name = "picky"

    def setup(self, config):
        envs = config.workers.num_envs_per_worker
        if config.training.train_batch_size % envs:
            raise config.fail(
                "training.train_batch_size", f"picky needs a multiple of workers.num_envs_per_worker ({envs})"
            )
        super().setup(config)
"""
PICKY_MESSAGE = "training.train_batch_size: picky needs a multiple of workers.num_envs_per_worker (2)"
PICKY_CONFIG = "algorithm: picky\nenv: {name: CartPole-v1}\nworkers: {num_envs_per_worker: 2}\n"


@pytest.fixture
def picky_env(tmp_path) -> dict[str, str]:
    """Environment variables of a subprocess in which the ``picky`` algorithm is an installed plugin."""
    site = folder(tmp_path / "site")
    info = folder(site / "picky-0.1.dist-info")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: picky\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(PICKY_ENTRY_POINTS)
    (site / "picky_mod.py").write_text(PICKY_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "RLGEAR_DISABLE_PLUGIN_AUTOLOAD"}
    env.update(RLGEAR_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONPATH=str(site))
    return env


def test_a_trainer_setup_raising_config_fail_names_the_file_or_the_set_and_the_key(picky_env, tmp_path):
    path = config_file(tmp_path, PICKY_CONFIG + "training: {train_batch_size: 63}\n")
    runs = tmp_path / "runs"
    for extra, where in (
        ([], str(path)),
        (["--set", "training.train_batch_size=65"], "--set training.train_batch_size=65"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "rlgear", "train", str(path), "--set", f"logging.dir={runs}", *extra],
            capture_output=True, text=True, timeout=120, env=picky_env,
        )  # fmt: skip
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stderr.strip().splitlines() == [f"rlgear: error: {where}: {PICKY_MESSAGE}"], out.stderr
        assert not runs.exists() or not any(runs.iterdir())  # no run folder left behind
    out = subprocess.run(  # the check passes: the run starts and trains
        [sys.executable, "-m", "rlgear", "train", str(path), "--set", f"logging.dir={runs}",
         "--set", "training.train_batch_size=64", "--set", "stop.training_iteration=1"],
        capture_output=True, text=True, timeout=300, env=picky_env,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (run_dir,) = runs.iterdir()
    assert len((run_dir / "progress.jsonl").read_text().splitlines()) == 1


def test_a_trainer_setup_raising_config_fail_gives_a_config_error_with_the_prefix(tmp_path):
    from rlgear import config as config_mod
    from rlgear.errors import ConfigError
    from rlgear.plugins.algorithms.ppo import PPO

    class Picky(PPO):
        def setup(self, config):
            envs = config.workers.num_envs_per_worker
            if config.training.train_batch_size % envs:
                raise config.fail(
                    "training.train_batch_size",
                    f"picky needs a multiple of workers.num_envs_per_worker ({envs})",
                )
            super().setup(config)

    path = config_file(
        tmp_path, "algorithm: ppo\nenv: {name: CartPole-v1}\nworkers: {num_envs_per_worker: 2}\n"
    )
    with pytest.raises(ConfigError) as caught:
        Picky(config_mod.load(path, ["training.train_batch_size=65"]))
    assert str(caught.value) == f"--set training.train_batch_size=65: {PICKY_MESSAGE}"
    path.write_text(path.read_text() + "training: {train_batch_size: 63}\n")
    with pytest.raises(ConfigError) as caught:
        Picky(str(path))
    assert str(caught.value) == f"{path}: {PICKY_MESSAGE}"
