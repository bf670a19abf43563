"""Writes the trainer checkpoints that tests/test_checkpoints_0_2.py restores.

They were written by rlgear at commit bc4ec55 (the 0.2 layout, before learning moved into its own
``Learner`` and ``rlgear.execution`` was regrouped into ``sampling``, ``distributed`` and the
families). Each case trains one iteration, saves a checkpoint, then restores that checkpoint into a
fresh trainer, trains one more iteration and records a digest of the weights it ends with. The test
proves that the current code restores the same checkpoint and, from it, makes the same update. Run
this again only to add a case, never to "fix" a failing test: the folders stand for checkpoints
users have.

    python tests/data/checkpoints-0.2/make_fixtures.py
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent

_BASE = {
    "seed": 0,
    "workers": {"num_envs_per_worker": 2},
    "logging": {"tensorboard": False, "progress": "none"},
}

#: case name -> config (merged over _BASE)
CASES: dict[str, dict] = {
    "ppo-torch": {
        "algorithm": "ppo",
        "backend": "torch",
        "env": {"name": "CartPole-v1"},
        "model": {"observation_filter": "mean_std"},
        "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
    },
    "ppo-tf": {
        "algorithm": "ppo",
        "backend": "tf",
        "env": {"name": "CartPole-v1"},
        "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
    },
    "ppo-lstm-torch": {
        "algorithm": "ppo",
        "backend": "torch",
        "env": {"name": "CartPole-v1"},
        "model": {"lstm": True, "lstm_cell_size": 8, "max_seq_len": 10},
        "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
    },
    "dqn-torch": {
        "algorithm": "dqn",
        "backend": "torch",
        "env": {"name": "CartPole-v1"},
        "training": {"learning_starts": 32, "train_batch_size": 16, "min_env_steps_per_iteration": 64},
    },
    "sac-torch": {
        "algorithm": "sac",
        "backend": "torch",
        "env": {"name": "Pendulum-v1"},
        "training": {"learning_starts": 32, "train_batch_size": 16, "min_env_steps_per_iteration": 64},
    },
    "impala-torch": {
        "algorithm": "impala",
        "backend": "torch",
        "env": {"name": "CartPole-v1"},
        "training": {"train_batch_size": 64, "min_env_steps_per_iteration": 64},
    },
    "es-numpy": {
        "algorithm": "es",
        "env": {"name": "CartPole-v1"},
        "training": {"num_perturbations": 4, "noise_table_size": 100000, "report_episodes": 1},
    },
}


def config_for(case: str, logdir: Path) -> dict:
    config = json.loads(json.dumps(_BASE))
    for key, value in CASES[case].items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    config["logging"]["dir"] = str(logdir)
    return config


def weights_digest(trainer) -> str:
    """sha256 of every policy's weights, rounded to 4 decimals (another BLAS may change a last bit)."""
    digest = hashlib.sha256()
    for policy_id, policy in sorted(trainer.policy_map.items()):
        for name, array in sorted(policy.get_weights().items()):
            digest.update(f"{policy_id}/{name}".encode())
            digest.update(np.round(np.asarray(array, dtype=np.float64), 4).tobytes())
    return digest.hexdigest()


def weights_fingerprint(trainer) -> dict[str, list[float]]:
    """Per weight array: its sum, its sum of squares and its dot product with a fixed random +-1
    vector (seeded by the name), in float64. Unlike :func:`weights_digest`, two machines whose
    BLAS or vector kernels round differently give fingerprints equal to a tolerance, while an
    update that differs by more than rounding moves them far beyond it."""
    out = {}
    for policy_id, policy in sorted(trainer.policy_map.items()):
        for name, array in sorted(policy.get_weights().items()):
            key = f"{policy_id}/{name}"
            flat = np.asarray(array, dtype=np.float64).reshape(-1)
            signs = np.random.default_rng(zlib.crc32(key.encode())).choice([-1.0, 1.0], size=flat.size)
            out[key] = [float(flat.sum()), float((flat * flat).sum()), float(flat @ signs)]
    return out


def add_fingerprints() -> None:
    """Run by 0.2's code (``python make_fixtures.py --fingerprints`` in a venv of commit bc4ec55):
    restore each committed checkpoint, train one more iteration, add the fingerprint to
    ``expected.json`` (the digest stays: it is the first machine's exact result)."""
    import platform

    from rlgear.discovery import registry

    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            config = config_for(case, Path(tmp))
            trainer = registry.load_algorithm(config["algorithm"])(config)
            trainer.restore(HERE / case)
            trainer.train()
            fingerprint, digest = weights_fingerprint(trainer), weights_digest(trainer)
            trainer.stop()
        path = HERE / case / "expected.json"
        expected = json.loads(path.read_text())
        expected["fingerprint_after_one_more_iteration"] = fingerprint
        expected["fingerprint_machine"] = (
            f"{platform.machine()} {platform.processor()}; digest there {digest}"
        )
        path.write_text(json.dumps(expected, indent=1) + "\n")
        print(
            case, digest, "matches" if digest == expected["weights_after_one_more_iteration"] else "differs"
        )


def main() -> None:
    import rlgear
    from rlgear.discovery import registry

    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            config = config_for(case, Path(tmp))
            trainer_cls = registry.load_algorithm(config["algorithm"])
            trainer = trainer_cls(config)
            trainer.train()
            path = trainer.save(Path(tmp) / "checkpoint")
            trainer.stop()
            restored = trainer_cls(config)
            restored.restore(path)
            restored.train()
            digest = weights_digest(restored)
            restored.stop()
            target = HERE / case
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(path, target)
            (target / "expected.json").write_text(
                json.dumps(
                    {"rlgear": rlgear.__version__, "weights_after_one_more_iteration": digest}, indent=1
                )
                + "\n"
            )
            print(case, digest)


if __name__ == "__main__":
    import sys

    add_fingerprints() if "--fingerprints" in sys.argv else main()
