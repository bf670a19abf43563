"""learners.device: the check before anything starts, the auto rule, and where a policy's tensors live.

The CPU tests run everywhere. Where real CUDA is needed a test says so
(``needs_cuda``) and runs when a GPU machine runs the suite; nothing here fakes a GPU. The one
test that moves policies to a device other than the CPU uses torch's ``meta`` device, which every
machine has and on which nothing runs: a tensor a policy forgot to move shows there as one still
on the CPU, with no GPU needed to find it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rlgear import Learner
from rlgear import config as config_mod
from rlgear.config.devices import check_device, resolve_device
from rlgear.config.sections import ModelConfig
from rlgear.discovery import registry
from rlgear.errors import DeviceError, UnsupportedError
from rlgear.plugins.backends.torch import TorchBackend
from rlgear.spaces import Box, Discrete
from tests.conftest import BACKENDS, needs_tf, small_config
from tests.test_cli_errors import run_cli
from tests.test_es_ars import evolution_config
from tests.test_learner import CARTPOLE_SPACES, ppo_rows

ROOT = Path(__file__).resolve().parent.parent
MINATAR_SPACES = (Box(np.zeros((10, 10, 4)), np.ones((10, 10, 4)), np.bool_), Discrete(3))
PENDULUM_SPACES = (Box(np.full(3, -8.0), np.full(3, 8.0)), Box(np.full(1, -2.0), np.full(1, 2.0)))

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def devices_here(backend: str) -> list[str]:
    if backend == "torch":
        return TorchBackend().devices()
    from rlgear.plugins.backends.tf import TFBackend

    return TFBackend().devices()


def missing(requested: str, here: list[str]) -> str:
    """``requested``, or on a machine that has it a device of the same kind that it lacks."""
    try:
        check_device(requested, here)
    except DeviceError:
        return requested
    return f"cuda:{sum(d.startswith('cuda') for d in here)}"


def run_config(tmp_path: Path, algorithm: str = "ppo", training: dict | None = None, **sections) -> dict:
    """``small_config`` for any algorithm: PPO's small batch keys only for PPO, then ``training``."""
    raw = small_config(tmp_path, algorithm=algorithm, **sections)
    base = raw["training"] if algorithm == "ppo" else {}
    raw["training"] = {**base, **(training or {})}
    return raw


def resolved(raw: dict) -> config_mod.RunConfig:
    return config_mod.resolve(raw, training_class=registry.load_algorithm(raw["algorithm"]).config_class)


# --- the rule --------------------------------------------------------------------------------------
def test_auto_takes_the_accelerator_for_conv_and_lstm_models_and_the_cpu_for_mlps():
    mlp, lstm = ModelConfig(), ModelConfig(lstm=True)
    image, flat = MINATAR_SPACES[0], CARTPOLE_SPACES[0]
    gpu = ["cpu", "cuda:0", "cuda:1"]
    assert resolve_device("auto", gpu, image, mlp) == "cuda:0"
    assert resolve_device("auto", gpu, flat, lstm) == "cuda:0"
    assert resolve_device("auto", gpu, flat, ModelConfig(attention=True)) == "cuda:0"  # the attention memory
    assert resolve_device("auto", gpu, flat, mlp) == "cpu"
    assert resolve_device("auto", ["cpu", "mps"], image, mlp) == "mps"
    assert resolve_device("auto", ["cpu"], image, lstm) == "cpu"  # no accelerator: the CPU, no error
    # asked for explicitly, the device is used whatever the model
    assert resolve_device("cuda", gpu, flat, mlp) == "cuda:0"
    assert resolve_device("cuda:1", gpu, flat, mlp) == "cuda:1"
    assert resolve_device("cpu", gpu, image, lstm) == "cpu"


@pytest.mark.parametrize(
    ("requested", "here", "missing_words"),
    [
        ("cuda", ["cpu"], "no CUDA device"),
        ("cuda:1", ["cpu", "cuda:0"], "no device cuda:1"),
        ("mps", ["cpu"], "no MPS device"),
    ],
)
def test_a_missing_device_is_one_error_naming_the_key_the_request_and_the_devices_there_are(
    requested, here, missing_words
):
    with pytest.raises(DeviceError) as caught:
        resolve_device(requested, here, *CARTPOLE_SPACES[:1], ModelConfig())
    message = str(caught.value)
    assert message.startswith(
        f"learners.device: {requested!r} asked for, but this machine has {missing_words}"
    )
    assert message.endswith(f"(devices here: {', '.join(here)})")
    assert "\n" not in message


# --- the check before anything starts ---------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("requested", ["cuda", "cuda:1", "mps"])
def test_rlgear_train_with_a_device_this_machine_lacks_exits_2_with_one_line(tmp_path, backend, requested):
    if backend == "tf" and requested == "mps":
        requested = "cuda:7"  # TF has no MPS kind of its own: another missing one
    here = devices_here(backend)
    device = missing(requested, here)
    config = tmp_path / "run.yaml"
    config.write_text(f"algorithm: ppo\nbackend: {backend}\nenv:\n  name: CartPole-v1\n")
    result = run_cli(
        "train",
        str(config),
        "--set",
        f"logging.dir={tmp_path / 'runs'}",
        "--set",
        f"learners.device={device}",
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"rlgear: error: --set learners.device={device}: learners.device: {device!r}")
    assert lines[0].endswith(f"(devices here: {', '.join(here)})")
    assert "cpu" in here
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written


def test_a_device_written_in_the_file_is_blamed_on_the_file(tmp_path):
    device = missing("cuda", devices_here("torch"))
    config = tmp_path / "run.yaml"
    config.write_text(f"algorithm: ppo\nenv:\n  name: CartPole-v1\nlearners:\n  device: '{device}'\n")
    result = run_cli("train", str(config), "--set", f"logging.dir={tmp_path / 'runs'}")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"rlgear: error: {config}: learners.device: {device!r} asked for, but this machine has "
        + ("no CUDA device" if device == "cuda" else f"no device {device}")
        + f" (devices here: {', '.join(devices_here('torch'))})"
    )


def test_a_framework_free_run_has_only_the_cpu_whatever_the_machine(tmp_path):
    es = registry.load_algorithm("es")
    raw = evolution_config(tmp_path, learners={"device": "cuda"})
    with pytest.raises(DeviceError, match=r"learners\.device: 'cuda' asked for.*\(devices here: cpu\)$"):
        es(resolved(raw))
    trainer = es(resolved({**raw, "learners": {"device": "auto"}}))
    try:
        assert trainer.learner.devices == {"default": "cpu"}
    finally:
        trainer.stop()


def test_to_device_on_a_framework_free_policy_refuses_anything_but_the_cpu(tmp_path):
    config = resolved(evolution_config(tmp_path))
    policy = registry.load_algorithm("es").policy_class("torch")(*CARTPOLE_SPACES, config)
    policy.to_device("cpu")  # where it is: nothing to do
    with pytest.raises(UnsupportedError, match="EvolutionPolicy learns on the CPU only"):
        policy.to_device("cuda")


def test_a_torch_policy_refuses_a_device_torch_lacks_here(tmp_path):
    config = resolved(small_config(tmp_path))
    policy = registry.load_algorithm("ppo").policy_class("torch")(*CARTPOLE_SPACES, config)
    device = missing("cuda", devices_here("torch"))
    with pytest.raises(DeviceError, match=r"^learners\.device: .* \(devices here: cpu"):
        policy.to_device(device)
    assert policy.device == torch.device("cpu")


# --- auto and cpu ---------------------------------------------------------------------------------
def test_auto_puts_an_mlp_on_the_cpu_and_a_conv_net_on_the_gpu_only_where_there_is_one(tmp_path):
    trainer = registry.load_algorithm("ppo")(resolved(small_config(tmp_path)))  # learners.device: auto
    try:
        trainer.train()
        assert trainer.config.learners.device == "auto"
        assert trainer.learner.devices == {"default": "cpu"}
        assert (trainer.learner.requested_device, trainer.learner.device) == ("auto", "cpu")
        assert trainer.policy.device == torch.device("cpu")
    finally:
        trainer.stop()
    config = resolved(small_config(tmp_path, model={"hidden_sizes": [16]}))
    learner = Learner.build(
        config, registry.load_algorithm("ppo").policy_class("torch"), MINATAR_SPACES, "", "auto"
    )
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert learner.devices == {"default": expected}
    assert learner.policy.device == torch.device(expected)


def learner_tensors(policy) -> dict[str, torch.Tensor]:
    """Every parameter (online and target networks) and every optimizer state tensor of a torch policy."""
    out = {f"model/{n}": p for n, p in policy.model.named_parameters()}
    target = getattr(policy, "target_model", None)
    if target is not None:
        out.update({f"target/{n}": p for n, p in target.named_parameters()})
    out.update({f"optimizer/{k}": v for k, v in policy.optimizer.state_arrays().items()})
    return out


def spy_on_the_loss(monkeypatch, policy) -> list[dict[str, torch.device]]:
    """The device of every batch tensor each call of ``policy.loss`` receives."""
    seen: list[dict[str, torch.device]] = []
    loss = policy.loss

    def spy(batch, *args):
        seen.append({key: value.device for key, value in batch.items()})
        return loss(batch, *args)

    monkeypatch.setattr(policy, "loss", spy)
    return seen


@pytest.mark.parametrize("algorithm", ["ppo", "sac"])
def test_with_device_cpu_everything_a_training_iteration_touches_is_on_the_cpu(
    tmp_path, monkeypatch, algorithm
):
    if algorithm == "ppo":
        raw = small_config(tmp_path, learners={"device": "cpu"})
    else:
        raw = run_config(
            tmp_path,
            "sac",
            env={"name": "Pendulum-v1"},
            model={"hidden_sizes": [16, 16]},
            workers={"num_envs_per_worker": 2, "rollout_fragment_length": 4},
            training={"learning_starts": 8, "train_batch_size": 8, "buffer_size": 100},
            learners={"device": "cpu"},
        )
    trainer = registry.load_algorithm(algorithm)(resolved(raw))
    try:
        policy = trainer.policy
        seen = spy_on_the_loss(monkeypatch, policy)
        result = trainer.train()
        assert policy.num_grad_updates > 0 and seen, "the iteration took no gradient step"
        assert trainer.learner.devices == {"default": "cpu"}
        assert {key for call in seen for key in call} >= {"obs", "actions"}
        assert {d.type for call in seen for d in call.values()} == {"cpu"}
        tensors = learner_tensors(policy)
        assert any(k.startswith("optimizer/") for k in tensors)
        assert {k: v.device.type for k, v in tensors.items() if v.device.type != "cpu"} == {}
        assert all(math.isfinite(v) for k, v in result.items() if k.startswith("learner/"))
    finally:
        trainer.stop()


# --- to_device reaches every tensor --------------------------------------------------------------------
def held_tensors(obj, prefix: str) -> dict[str, torch.Tensor]:
    """The tensors ``obj`` holds in its attributes: directly, in modules, lists and dicts."""
    out: dict[str, torch.Tensor] = {}
    for name, value in vars(obj).items():
        items = (
            value.items()
            if isinstance(value, dict)
            else enumerate(value)
            if isinstance(value, list | tuple)
            else [("", value)]
        )
        for key, item in items:
            inner = (
                item.items()
                if isinstance(item, dict)
                else enumerate(item)
                if isinstance(item, list | tuple)
                else [("", item)]
            )
            for key2, leaf in inner:
                where = f"{prefix}.{name}{f'[{key}]' if key != '' else ''}{f'[{key2}]' if key2 != '' else ''}"
                if isinstance(leaf, torch.Tensor):
                    out[where] = leaf
                elif isinstance(leaf, torch.nn.Module):
                    named = [*leaf.named_parameters(), *leaf.named_buffers()]
                    out.update({f"{where}.{n}": t for n, t in named})
    return out


CASES = {
    "sac": ("sac", PENDULUM_SPACES, {}, {}),
    "td3": ("td3", PENDULUM_SPACES, {}, {}),
    "dqn-rainbow": ("dqn", (PENDULUM_SPACES[0], Discrete(3)), {"num_atoms": 5, "noisy": True}, {}),
    "appo": ("appo", CARTPOLE_SPACES, {}, {}),
    "ppo-lstm": ("ppo", CARTPOLE_SPACES, {}, {"lstm": True, "lstm_cell_size": 8}),
    "ppo-attention": (
        "ppo",
        CARTPOLE_SPACES,
        {},
        {"attention": True, "attention_dim": 8, "attention_memory": 4},
    ),
    "ppo-conv-adamw": ("ppo", MINATAR_SPACES, {"optimizer": "torch.optim.AdamW"}, {"hidden_sizes": [8]}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_to_device_moves_every_tensor_a_torch_policy_holds(tmp_path, monkeypatch, case):
    algorithm, spaces, training, model = CASES[case]
    monkeypatch.setattr("rlgear.plugins.backends.torch.device.torch_devices", lambda: ["cpu", "meta"])
    raw = run_config(tmp_path, algorithm, training, model=model)
    policy = registry.load_algorithm(algorithm).policy_class("torch")(*spaces, resolved(raw))
    optimizer = policy.optimizer
    for param in optimizer.params:  # an optimizer step first, so that the optimizer has state to move
        param.grad = torch.ones_like(param)
    optimizer.step()
    optimizer.zero_grad()
    policy.to_device("meta")
    assert policy.device == torch.device("meta")
    tensors = {**held_tensors(policy, "policy"), **held_tensors(optimizer, "optimizer")}
    inner = getattr(optimizer, "inner", None)  # a torch.optim optimizer: its per-parameter state
    if inner is not None:
        tensors.update(
            {
                f"inner/{i}/{k}": v
                for i, s in enumerate(inner.state.values())
                for k, v in s.items()
                if k != "step"
            }
        )
        assert len(inner.state) == len(optimizer.params)
    assert len(tensors) > 2 * len(list(policy.model.parameters()))  # parameters, state and more
    assert {k: str(v.device) for k, v in tensors.items() if v.device.type != "meta"} == {}
    # the optimizer steps the model's parameters, whatever objects the move left them as
    trained = [p for p in policy.model.parameters() if p.requires_grad]
    assert [id(p) for p in optimizer.params] == [id(p) for p in trained]


# --- TF ---------------------------------------------------------------------------------------------
@needs_tf
def test_a_tf_policy_on_the_cpu_learns_under_tf_device(tmp_path):
    from rlgear.plugins.backends.tf.device import OnDevice

    config = resolved(small_config(tmp_path, backend="tf"))
    policy = registry.load_algorithm("ppo").policy_class("tf")(*CARTPOLE_SPACES, config)
    before = policy.get_weights()
    policy.to_device("cpu")
    assert (policy.device, policy.tf_device) == ("cpu", "/CPU:0")
    stats = policy.learn_on_batch(ppo_rows(64))
    assert all(isinstance(step, OnDevice) for step in policy._sgd_steps.values()) and policy._sgd_steps
    assert math.isfinite(stats["total_loss"])
    assert any(not np.array_equal(before[k], v) for k, v in policy.get_weights().items())
    with pytest.raises(DeviceError, match=r"\(devices here: cpu"):
        policy.to_device(missing("cuda", devices_here("tf")))


# --- on a CUDA device ---------------------------------------------------------------------------------
def cuda_trainer(tmp_path, algorithm: str = "ppo", training: dict | None = None, **sections):
    raw = run_config(tmp_path, algorithm, training, learners={"device": "cuda"}, **sections)
    return registry.load_algorithm(algorithm)(resolved(raw), logdir=tmp_path / f"run-{algorithm}")


@needs_cuda
def test_ppo_cartpole_trains_on_cuda(tmp_path):
    trainer = cuda_trainer(tmp_path)
    try:
        for _ in range(2):
            result = trainer.train()
        assert trainer.learner.devices == {"default": "cuda:0"}
        tensors = learner_tensors(trainer.policy)
        assert {k for k, v in tensors.items() if v.device.type != "cuda"} == set()
        assert all(math.isfinite(v) for k, v in result.items() if k.startswith("learner/"))
        assert result["learner/num_grad_updates"] > 0
    finally:
        trainer.stop()


@needs_cuda
def test_a_checkpoint_moves_between_cuda_and_cpu_with_equal_weights(tmp_path):
    gpu = cuda_trainer(tmp_path)
    cpu = registry.load_algorithm("ppo")(
        resolved(small_config(tmp_path, learners={"device": "cpu"})), logdir=tmp_path / "run-cpu"
    )
    try:
        gpu.train()
        cpu.restore(gpu.save())
        for key, value in gpu.policy.get_weights().items():
            np.testing.assert_array_equal(cpu.policy.get_weights()[key], value)
        cpu.train()  # and the reverse: a CPU run's checkpoint on the GPU, optimizer state included
        gpu.restore(cpu.save())
        for key, value in cpu.policy.get_weights().items():
            np.testing.assert_array_equal(gpu.policy.get_weights()[key], value)
        assert {k for k, v in learner_tensors(gpu.policy).items() if v.device.type != "cuda"} == set()
        assert math.isfinite(gpu.train()["learner/total_loss"])
    finally:
        gpu.stop()
        cpu.stop()


@needs_cuda
@pytest.mark.parametrize("algorithm", ["sac", "dqn"])
def test_sac_and_dqn_learn_on_cuda(tmp_path, algorithm):
    env = "Pendulum-v1" if algorithm == "sac" else "CartPole-v1"
    trainer = cuda_trainer(
        tmp_path,
        algorithm,
        env={"name": env},
        workers={"num_envs_per_worker": 2, "rollout_fragment_length": 4},
        training={"learning_starts": 8, "train_batch_size": 8, "buffer_size": 100},
    )
    try:
        result = trainer.train()
        assert trainer.policy.num_grad_updates > 0
        assert {k for k, v in learner_tensors(trainer.policy).items() if v.device.type != "cuda"} == set()
        assert all(math.isfinite(v) for k, v in result.items() if k.startswith("learner/"))
    finally:
        trainer.stop()


@needs_cuda
def test_a_custom_model_without_a_numpy_twin_acts_and_learns_on_cuda(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    trainer = cuda_trainer(tmp_path, model={"custom": "custom_models:TinyActorCritic"})
    try:
        assert trainer.policy.fast_actor is None  # acting goes through the model, on the GPU
        result = trainer.train()
        assert next(trainer.policy.model.parameters()).device.type == "cuda"
        assert result["timesteps_total"] > 0 and math.isfinite(result["learner/total_loss"])
    finally:
        trainer.stop()


@needs_cuda
def test_an_lstm_policy_learns_on_cuda(tmp_path):
    config = resolved(small_config(tmp_path, model={"lstm": True, "lstm_cell_size": 16, "max_seq_len": 8}))
    learner = Learner.build(
        config, registry.load_algorithm("ppo").policy_class("torch"), CARTPOLE_SPACES, "", "auto"
    )
    assert learner.devices == {"default": "cuda:0"}  # auto: an LSTM goes to the GPU
    from bench.gpu import build_learner  # the benchmark's LSTM workload: padded sequences, state-in

    learner, batch, _ = build_learner("ppo-lstm-cartpole", "cuda")
    stats = learner.update(batch)
    assert all(math.isfinite(v) for v in stats.values()) and stats["num_grad_updates"] > 0
    assert {k for k, v in learner_tensors(learner.policy).items() if v.device.type != "cuda"} == set()


# --- bench/gpu.py ---------------------------------------------------------------------------------
def test_bench_gpu_quick_reports_finite_updates_per_second_for_the_three_workloads(tmp_path):
    out = tmp_path / "results"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu.py"), "--quick", "--out", str(out)],
        check=True, capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    (path,) = out.glob("gpu-*.json")
    report = json.loads(path.read_text())
    assert report["quick"] is True and report["torch"] == torch.__version__
    cpu = {row["workload"]: row for row in report["results"] if row["device"] == "cpu"}
    assert set(cpu) == {"ppo-conv-minatar", "sac-mlp-halfcheetah", "ppo-lstm-cartpole"}
    for row in cpu.values():
        assert math.isfinite(row["updates_per_s"]) and row["updates_per_s"] > 0
        assert set(row["split_ms"]) == {"transfer", "forward_backward", "optimizer_step"}
        assert all(v >= 0 for v in row["split_ms"].values())


def test_bench_gpu_learner_scaling_runs_two_data_parallel_learners_on_the_cpu(tmp_path):
    """The 1-vs-2-learners part of bench/gpu.py (one process per learner, gloo here, NCCL on GPUs)."""
    out = tmp_path / "results"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu.py"), "--quick", "--scaling-device", "cpu",
         "--workloads", "sac-mlp-halfcheetah", "--out", str(out)],
        check=True, capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    (path,) = out.glob("gpu-*.json")
    scaling = json.loads(path.read_text())["learner_scaling"]
    assert scaling["num_learners"] == 2
    (row,) = scaling["results"]
    assert row["workload"] == "sac-mlp-halfcheetah" and row["device"] == "cpu"
    assert row["updates_per_s_1"] > 0 and row["updates_per_s_2"] > 0
    assert math.isfinite(row["speedup"])
