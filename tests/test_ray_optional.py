"""Ray is optional: a run without remote workers never imports it and trains where it is not installed.

Each check runs in a fresh interpreter whose import system refuses ``ray``
(a meta-path finder installed before anything else), which is what a machine
without Ray looks like to rlgear.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

BLOCK_RAY = textwrap.dedent(
    """
    import sys

    class NoRay:
        def find_spec(self, name, path=None, target=None):
            if name == "ray" or name.startswith("ray."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoRay())
    """
)


def run_without_ray(code: str, tmp_path) -> dict:
    script = BLOCK_RAY + textwrap.dedent(code)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env={"RLGEAR_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_run_with_no_workers_trains_where_ray_cannot_be_imported(tmp_path):
    out = run_without_ray(
        f"""
        import json, sys
        import rlgear.distributed.async_ops, rlgear.distributed.ray_session, rlgear.distributed.remote_worker  # importable without Ray
        from rlgear.discovery import registry
        ppo = registry.load_algorithm("ppo")
        trainer = ppo({{"algorithm": "ppo", "seed": 0, "env": {{"name": "CartPole-v1"}},
                        "workers": {{"num_workers": 0, "num_envs_per_worker": 2}},
                        "training": {{"train_batch_size": 64, "sgd_minibatch_size": 32}},
                        "logging": {{"dir": {str(tmp_path)!r}, "tensorboard": False, "progress": "none"}}}})
        result = trainer.train()
        trainer.stop()
        print(json.dumps({{"steps": result["timesteps_total"], "ray": "ray" in sys.modules,
                          "keys": [k for k in result if k.startswith("num_worker")]}}))
        """,
        tmp_path,
    )
    assert out["steps"] > 0
    assert out["ray"] is False
    assert out["keys"] == []  # restart counters appear only with remote workers


def test_asking_for_workers_without_ray_says_what_to_install(tmp_path):
    out = run_without_ray(
        """
        import json
        from rlgear.discovery import registry
        from rlgear.errors import PluginError
        ppo = registry.load_algorithm("ppo")
        try:
            ppo({"algorithm": "ppo", "env": {"name": "CartPole-v1"}, "workers": {"num_workers": 2},
                 "logging": {"tensorboard": False, "progress": "none"}})
        except PluginError as err:
            print(json.dumps({"error": str(err)}))
        """,
        tmp_path,
    )
    assert "pip install 'rlgear[ray]'" in out["error"]
    assert "workers.num_workers" in out["error"]
