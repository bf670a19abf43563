"""Training from clients over TCP: PPO solves CartPole from 8 client processes, one of them sending a
poisonous reward; a killed client's partial episode never reaches a batch; invalid rows are dropped by
the evaluator."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import rlgear
from rlgear import config as config_mod
from rlgear.sample_batch import SampleBatch
from rlgear.sampling.rollout_worker import drop_invalid_rows
from rlgear.timestep import StepType

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "examples" / "external_cartpole_client.py"
F, M, L = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


def test_rows_of_an_aborted_episode_in_the_fragment_become_last_and_are_not_counted():
    steps = np.array([[F, M], [M, M], [M, L], [L, L], [F, F]], dtype=np.int32)  # [T+1=5, B=2]
    valid = np.array([[1, 1], [1, 1], [1, 1], [0, 0], [1, 1]], dtype=bool)
    # env 0: FIRST MID MID then invalid -> aborted (3 rows dropped, 2 of them env steps)
    # env 1: its episode ended (LAST) before the invalid row -> nothing of it is dropped
    fragment = {SampleBatch.STEP_TYPES: steps.copy(), SampleBatch.REWARDS: np.ones((5, 2), np.float32)}
    dropped = drop_invalid_rows(fragment, valid.copy())
    assert dropped == 2
    assert fragment[SampleBatch.STEP_TYPES][:, 0].tolist() == [L, L, L, L, F]
    assert fragment[SampleBatch.STEP_TYPES][:, 1].tolist() == steps[:, 1].tolist()
    assert fragment[SampleBatch.REWARDS][:4, 0].tolist() == [0, 0, 0, 0]


def test_an_episode_begun_in_an_earlier_fragment_is_dropped_back_to_row_zero():
    steps = np.array([[M], [M], [L]], dtype=np.int32)
    valid = np.array([[1], [1], [0]], dtype=bool)
    fragment = {SampleBatch.STEP_TYPES: steps, SampleBatch.REWARDS: np.ones((3, 1), np.float32)}
    assert drop_invalid_rows(fragment, valid) == 2
    assert (fragment[SampleBatch.STEP_TYPES] == L).all()


def _config(tmp_path, address_file, *overrides):
    return config_mod.load(
        ROOT / "configs" / "ppo-cartpole-external.yaml",
        [
            "env.kwargs.port=0",
            f"env.kwargs.address_file={address_file}",
            f"logging.dir={tmp_path / 'runs'}",
            "logging.tensorboard=false",
            "logging.progress=none",
            "checkpoint.every=0",
            "checkpoint.at_end=false",
            *overrides,
        ],
    )


def _wait_address(address_file: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not (address_file.exists() and address_file.read_text().strip()):
        assert time.monotonic() < deadline, "the server never wrote its address"
        time.sleep(0.05)
    return address_file.read_text().strip()


def _clients(address: str, seeds, **popen) -> list[subprocess.Popen]:
    """One example client per seed; a seed of None lets the client seed its env from its slot."""
    return [
        subprocess.Popen(
            [sys.executable, str(CLIENT), address, *(["--seed", str(seed)] if seed is not None else [])],
            **popen,
        )
        for seed in seeds
    ]


def _kill_all(procs):
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


POISONER = """
import json, sys
import gymnasium as gym
from rlgear.external.client import Client
from rlgear.external.wire import ServerError
client = Client(sys.argv[1])
host, port = client.sock.getsockname()[:2]
print(json.dumps({"slot": client.slot, "address": f"{host}:{port}"}), flush=True)
env = gym.make("CartPole-v1")
obs, _ = env.reset(seed=1 + client.slot)
action = client.init(obs)
try:
    for step in range(200_000):  # plays on, as an env would, until refused (or killed)
        obs, reward, terminated, truncated, _ = env.step(action)
        reward = 1e20 if step == 2 else reward  # a finite float32, whose square is not
        action = client.send(reward, obs, terminated, truncated)
        if action is None:
            obs, _ = env.reset()
            action = client.init(obs)
except ServerError as err:
    print(json.dumps({"error": err.name, "message": err.detail}), flush=True)
"""


@pytest.mark.slow
def test_ppo_solves_cartpole_from_8_client_processes_one_poisoned_within_150k_env_steps(tmp_path, caplog):
    """One of the 8 clients sends a reward of 1e20 on its third step (it used to stop the run in its
    first iteration, losses infinite): it alone is dropped and named in the log, the 7 others solve.

    Deterministic, so a loaded machine cannot change what is learned: the poisoner connects first
    (slot 0), each other client seeds its env from its slot (not from the order the clients connected
    in), and a step waits for clients between episodes (start_grace_s 30 s; the default 2 ms lets a
    client late with its ``start`` sit out steps, which on a busy machine changes the batches from run
    to run). Seeded: solved at 66,895 env steps (the same in repeated runs; 73,425 when all 8
    clients were healthy)."""
    address_file = tmp_path / "address"
    procs: list[subprocess.Popen] = []
    poisoner: dict = {}

    def launch():
        address = _wait_address(address_file)
        proc = subprocess.Popen([sys.executable, "-c", POISONER, address], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        poisoner.update(json.loads(proc.stdout.readline()), proc=proc)  # connected: slot 0 is its
        procs.extend(_clients(address, [None] * 7, stdout=subprocess.DEVNULL))

    launcher = threading.Thread(target=launch, daemon=True)
    launcher.start()
    try:
        with caplog.at_level(logging.WARNING, logger="rlgear.external"):
            result = rlgear.train(_config(tmp_path, address_file, "env.kwargs.start_grace_s=30"))
        refused = json.loads(poisoner["proc"].communicate(timeout=30)[0])
    finally:
        launcher.join(60)
        _kill_all(procs)
    assert result["episode_return_mean"] >= 475, result
    assert result["timesteps_total"] <= 150_000 + 2048
    assert poisoner["slot"] == 0
    assert refused["error"] == "BAD_MESSAGE" and "max_abs_reward" in refused["message"], refused
    lines = [r.getMessage() for r in caplog.records]
    assert any(poisoner["address"] in line and "BAD_MESSAGE (8)" in line for line in lines), lines


VICTIM = """
import json, sys, time
import gymnasium as gym
from rlgear.external.client import Client
env = gym.make("CartPole-v1")
client = Client(sys.argv[1])
episode = 0
obs, _ = env.reset(seed=123)
action = client.init(obs)
sent = [obs.tolist()]
while True:
    obs, reward, terminated, truncated, _ = env.step(action)
    if episode == 2 and len(sent) == 5:  # mid-episode: report what was sent, then hang until killed
        print(json.dumps({"partial": sent, "first_episode": first}), flush=True)
        time.sleep(600)
    action = client.send(reward, obs, terminated, truncated)
    sent.append(obs.tolist())
    if action is None:
        if episode == 0:
            first = sent
        episode += 1
        obs, _ = env.reset()
        action = client.init(obs)
        sent = [obs.tolist()]
"""


class BatchRecorder:
    def __init__(self):
        self.batches: list[tuple[float, np.ndarray]] = []

    @rlgear.hookimpl
    def on_sample_end(self, worker, batch):
        self.batches.append((time.monotonic(), np.array(batch[SampleBatch.OBS], copy=True)))
        self.episodes_aborted = worker.episodes_aborted


@pytest.mark.slow
def test_a_client_killed_mid_episode_does_not_stop_training_and_its_partial_episode_never_reaches_a_batch(
    tmp_path,
):
    address_file = tmp_path / "address"
    config = _config(
        tmp_path,
        address_file,
        "env.kwargs.min_clients=4",
        "workers.num_envs_per_worker=4",
        "workers.batch_mode=complete_episodes",
        "training.sgd_minibatch_size=128",
        "training.num_sgd_iter=2",
        "training.min_env_steps_per_iteration=256",
        "stop={timesteps_total: 4000}",
    )
    procs: list[subprocess.Popen] = []
    state: dict = {}

    def launch():
        address = _wait_address(address_file)
        victim = subprocess.Popen(
            [sys.executable, "-c", VICTIM, address], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
        )
        procs.append(victim)
        procs.extend(_clients(address, range(1, 4), stdout=subprocess.DEVNULL))
        line = victim.stdout.readline()  # blocks until the victim is mid-episode
        sent = json.loads(line)
        state["partial"] = np.array(sent["partial"], dtype=np.float32)
        state["first_episode"] = np.array(sent["first_episode"], dtype=np.float32)
        victim.send_signal(signal.SIGKILL)
        state["killed_at"] = time.monotonic()

    recorder = BatchRecorder()
    launcher = threading.Thread(target=launch, daemon=True)
    launcher.start()
    try:
        result = rlgear.train(config, hooks=[recorder])
    finally:
        launcher.join(60)
        _kill_all(procs)
    assert "killed_at" in state, "the victim never reached the middle of its third episode"
    assert result["timesteps_total"] >= 4000  # training went on after the kill
    after = [t for t, _ in recorder.batches if t > state["killed_at"]]
    assert after, "no batch was sampled after the kill"
    assert recorder.episodes_aborted == 1  # the evaluator saw the abort
    partial = state["partial"]
    assert len(partial) == 5
    for _, obs in recorder.batches:
        for row in partial:
            assert not np.any(np.all(obs == row, axis=1)), (
                "a row of the killed client's partial episode was trained on"
            )
    # the check can fail: the victim's finished first episode did reach a batch
    trained = np.concatenate([obs for _, obs in recorder.batches])
    assert any(np.all(trained == row, axis=1).any() for row in state["first_episode"])


@pytest.mark.slow
@pytest.mark.parametrize("with_clients", [True, False])
def test_rlgear_serve_checkpoints_and_exits_cleanly_on_sigterm(tmp_path, with_clients):
    """With clients playing, or blocked waiting for the first one: SIGTERM writes a checkpoint, exit 0."""
    address_file = tmp_path / "address"
    server = subprocess.Popen(
        [
            sys.executable, "-m", "rlgear", "serve", str(ROOT / "configs" / "ppo-cartpole-external.yaml"),
            "--progress", "plain", "--set", "env.kwargs.port=0", "--set", f"env.kwargs.address_file={address_file}",
            "--set", "env.kwargs.min_clients=2", "--set", f"logging.dir={tmp_path / 'runs'}",
            "--set", "logging.tensorboard=false", "--set", "training.num_sgd_iter=1",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    clients: list[subprocess.Popen] = []
    try:
        address = _wait_address(address_file)
        if with_clients:
            clients = _clients(address, (1, 2), stdout=subprocess.DEVNULL)
            deadline = time.monotonic() + 120
            while not list((tmp_path / "runs").glob("*/progress.jsonl")) or not (
                next((tmp_path / "runs").glob("*/progress.jsonl")).read_text().strip()
            ):
                assert time.monotonic() < deadline and server.poll() is None, "no iteration finished"
                time.sleep(0.2)
        else:
            time.sleep(1.0)
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
        _kill_all(clients)
    assert server.returncode == 0, output
    assert f"listening on {address}" in output
    assert list((tmp_path / "runs").glob("*/checkpoint_*")), output
