"""`import rlgear` stays light; a torch run never imports tensorflow or ray."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "tensorflow", "ray", "gymnasium", "tensorboardX")


def run_python(code: str, **env) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def test_import_rlgear_imports_no_framework_and_is_fast():
    code = (
        "import sys, time, json\n"
        "start = time.perf_counter()\n"
        "import rlgear\n"
        "elapsed = time.perf_counter() - start\n"
        f"print(json.dumps({{'elapsed': elapsed, 'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))\n"
    )
    timings = [json.loads(run_python(code)) for _ in range(3)]
    for t in timings:
        assert t["loaded"] == [], f"import rlgear imported {t['loaded']}"
    assert min(t["elapsed"] for t in timings) < 0.3, timings


def test_listing_plugin_names_imports_no_plugin_module():
    code = (
        "import sys, json\n"
        "from rlgear import registry\n"
        "names = {k: registry.names(k) for k in registry.GROUPS}\n"
        "print(json.dumps({'names': names, 'plugins_loaded': sorted(m for m in sys.modules "
        "if m.startswith('rlgear.plugins.') or m in ('torch', 'gymnasium'))}))\n"
    )
    out = json.loads(run_python(code))
    assert "ppo" in out["names"]["algorithm"] and "torch" in out["names"]["backend"]
    assert out["plugins_loaded"] == []


def test_a_torch_run_never_imports_tensorflow_or_ray(tmp_path):
    code = (
        "import sys, json, rlgear\n"
        "result = rlgear.train({'algorithm': 'ppo', 'seed': 0, 'env': {'name': 'CartPole-v1'},\n"
        "    'workers': {'num_envs_per_worker': 2}, 'training': {'train_batch_size': 64},\n"
        f"    'logging': {{'dir': {str(tmp_path)!r}}}, 'stop': {{'training_iteration': 2}}}})\n"
        "print(json.dumps({'iterations': result['training_iteration'],\n"
        "    'loaded': [m for m in ('tensorflow', 'ray', 'keras', 'jax') if m in sys.modules],\n"
        "    'torch': 'torch' in sys.modules}))\n"
    )
    out = json.loads(run_python(code))
    assert out["iterations"] == 2 and out["torch"]
    assert out["loaded"] == []


def test_hookspecs_imports_the_types_of_its_arguments_only_for_type_checkers():
    # .importlinter leaves out imports under `if TYPE_CHECKING:` (exclude_type_checking_imports): rlgear.hookspecs
    # imports rlgear.trainer and rlgear.sampling.rollout_worker that way, for type checkers only.
    code = (
        "import sys, json, typing\n"
        "import rlgear.hookspecs as h\n"
        "loaded = sorted(m for m in sys.modules if m in ('rlgear.trainer', 'rlgear.sample_batch', 'ray')\n"
        "    or m.startswith(('rlgear.sampling', 'rlgear.distributed')))\n"
        "from rlgear.sampling.rollout_worker import RolloutWorker\n"
        "from rlgear.sampling.metrics import Episode\n"
        "from rlgear.sample_batch import SampleBatch\n"
        "from rlgear.trainer import Trainer\n"
        "types = {'RolloutWorker': RolloutWorker, 'Episode': Episode, 'SampleBatch': SampleBatch, 'Trainer': Trainer}\n"
        "hints = {name: {arg: getattr(t, '__qualname__', str(t)) for arg, t in\n"
        "    typing.get_type_hints(getattr(h, name), localns=types).items()}\n"
        "    for name in ('on_trainer_init', 'on_episode_end', 'on_sample_end', 'on_checkpoint')}\n"
        "print(json.dumps({'loaded': loaded, 'hints': hints}))\n"
    )
    out = json.loads(run_python(code))
    assert out["loaded"] == [], f"import rlgear.hookspecs imported {out['loaded']}"
    hints = out["hints"]  # the annotations name the real classes
    assert hints["on_trainer_init"]["trainer"] == "Trainer"
    assert (
        hints["on_episode_end"]["worker"] == "RolloutWorker"
        and hints["on_episode_end"]["episode"] == "Episode"
    )
    assert hints["on_sample_end"]["batch"] == "SampleBatch"
    assert hints["on_checkpoint"] == {"trainer": "Trainer", "checkpoint_dir": "str", "return": "NoneType"}
