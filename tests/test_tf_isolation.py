"""Lazy and quiet: a tf run never imports torch (and the reverse), TF starts silently, threads follow the budget.

Each check runs a real short training run in a fresh interpreter and looks at
``sys.modules`` and stderr afterwards (an import in a test process would prove nothing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import needs_tf

# What TensorFlow's start-up prints when it is not silenced (oneDNN notice, CPU-feature
# notice, absl preamble, C++ log lines).
TF_NOISE = ("oneDNN", "cpu_feature_guard", "absl::InitializeLog", "I0000 ", "W0000 ", "E0000 ")


def run_python(code: str, **env: str) -> tuple[dict, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TF_")}
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environ
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def train_code(tmp_path, backend: str, num_cpus: int = 1) -> str:
    return (
        "import sys, json, rlgear\n"
        f"result = rlgear.train({{'algorithm': 'ppo', 'backend': {backend!r}, 'seed': 0,\n"
        "    'env': {'name': 'CartPole-v1'},\n"
        f"    'workers': {{'num_envs_per_worker': 2, 'num_cpus_for_driver': {num_cpus}}},\n"
        "    'training': {'train_batch_size': 64, 'sgd_minibatch_size': 32, 'num_sgd_iter': 2},\n"
        # the framework acting path (XLA-compiled on tf) rather than the numpy twin
        "    'model': {'numpy_inference': False},\n"
        f"    'logging': {{'dir': {str(tmp_path)!r}, 'tensorboard': False, 'progress': 'none'}},\n"
        "    'stop': {'training_iteration': 2}})\n"
        "out = {'iterations': result['training_iteration'],\n"
        "       'loaded': sorted(m for m in ('torch', 'tensorflow', 'keras', 'ray', 'jax') if m in sys.modules)}\n"
        "if 'tensorflow' in sys.modules:\n"
        "    import os, tensorflow as tf\n"
        "    out['env'] = [os.environ.get(k) for k in ('TF_CPP_MIN_LOG_LEVEL', 'TF_ENABLE_ONEDNN_OPTS')]\n"
        "    out['threads'] = [tf.config.threading.get_intra_op_parallelism_threads(),\n"
        "                      tf.config.threading.get_inter_op_parallelism_threads()]\n"
        "print(json.dumps(out))\n"
    )


@needs_tf
def test_a_tf_run_never_imports_torch_is_silent_and_sizes_tf_thread_pools(tmp_path):
    out, stderr = run_python(train_code(tmp_path, "tf", num_cpus=2))
    assert out["iterations"] == 2
    assert out["loaded"] == ["keras", "tensorflow"]  # tensorflow imports keras itself; no torch, no ray
    assert out["threads"] == [2, 2]  # workers.num_cpus_for_driver
    assert out["env"] == ["2", "0"]  # set by rlgear before tensorflow was imported
    noise = [line for line in stderr.splitlines() if any(marker in line for marker in TF_NOISE)]
    assert noise == [], stderr


def test_a_torch_run_never_imports_tensorflow(tmp_path):
    out, _ = run_python(train_code(tmp_path, "torch"))
    assert out["iterations"] == 2
    assert out["loaded"] == ["torch"]


@needs_tf
def test_tf_log_settings_the_user_made_are_kept():
    code = (
        "import os, json\n"
        "import rlgear.plugins.backends.tf\n"
        "print(json.dumps({k: os.environ.get(k) for k in ('TF_CPP_MIN_LOG_LEVEL', 'TF_ENABLE_ONEDNN_OPTS')}))\n"
    )
    # The user asked for TF's log: rlgear leaves both variables as they are.
    verbose, _ = run_python(code, TF_CPP_MIN_LOG_LEVEL="0", TF_ENABLE_ONEDNN_OPTS="1")
    assert verbose == {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_ENABLE_ONEDNN_OPTS": "1"}
