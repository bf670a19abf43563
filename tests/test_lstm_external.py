"""Recurrent state follows the external-env server's client slots: a new client in a freed slot starts at zero."""

from __future__ import annotations

import threading
import time

import numpy as np

from rlgear import config as config_mod
from rlgear import env as env_mod
from rlgear.discovery import registry
from rlgear.external.client import Client
from rlgear.sample_batch import SampleBatch as SB
from rlgear.sampling.rollout_worker import RolloutWorker
from rlgear.timestep import StepType
from tests.numpy_reference import random_weights

OBS_SPACE = {"type": "Box", "shape": [3], "dtype": "float32", "low": ["-inf"] * 3, "high": ["inf"] * 3}
ACT_SPACE = {"type": "Discrete", "n": 2}


class SamplingThread:
    """Runs an LSTM policy's evaluator over the external env in a thread, keeping every fragment."""

    def __init__(self, tmp_path):
        raw = {
            "algorithm": "ppo",
            "backend": "torch",
            "seed": 1,
            "env": {
                "adapter": "external",
                "name": "lstm-test",
                "kwargs": {"observation_space": OBS_SPACE, "action_space": ACT_SPACE, "port": 0},
            },
            "workers": {"num_envs_per_worker": 2, "rollout_fragment_length": 4},
            "model": {"lstm": True, "lstm_cell_size": 4, "hidden_sizes": [8], "max_seq_len": 4},
            "logging": {"dir": str(tmp_path / "runs"), "tensorboard": False, "progress": "none"},
        }
        config = config_mod.resolve(raw)
        trainer_cls = registry.load_algorithm("ppo")
        env_mod.stop_requested.clear()
        self.evaluator = RolloutWorker(
            config, trainer_cls.policy_class("torch"), registry.load_env_adapter("external")
        )
        policy = self.evaluator.policy
        policy.set_weights(random_weights(policy.get_weights(), seed=4, gain=2.0))
        self.fragments: list = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        host, port = self.evaluator.env.server.address
        return f"{host}:{port}"

    def _run(self):
        try:
            while True:
                self.fragments.append(self.evaluator._sample_fragment())
        except env_mod.EnvInterrupted:
            pass
        except BaseException as err:  # surfaced by stop()
            self.error = err

    def stop(self):
        env_mod.stop_requested.set()
        self.thread.join(10)
        env_mod.stop_requested.clear()
        self.evaluator.stop()
        if self.error is not None:
            raise self.error

    def rows(self, slot: int) -> list[tuple[int, bool, np.ndarray]]:
        """(step type, valid, state-in h) of one slot over time (bootstrap rows counted once)."""
        out = []
        for fragment in self.fragments:
            for t in range(fragment[SB.STEP_TYPES].shape[0] - 1):
                out.append((int(fragment[SB.STEP_TYPES][t, slot]), True, fragment[SB.state_in(0)][t, slot]))
        return out


def test_a_client_taking_a_dropped_clients_slot_starts_from_a_zero_state(tmp_path):
    sampler = SamplingThread(tmp_path)
    try:
        holder = Client(sampler.address)
        client = Client(sampler.address)
        client.init(np.zeros(3, np.float32))
        for k in range(3):
            client.send(1.0, np.full(3, k + 1.0, np.float32))
        slot = client.slot
        client.sock.close()  # vanish mid-episode: its state must not leak into the next client's episode
        client.sock = None
        time.sleep(0.3)
        other = Client(sampler.address)
        assert other.slot == slot
        other.init(np.full(3, 5.0, np.float32))
        for _ in range(6):
            other.send(1.0, np.full(3, 5.0, np.float32))
        other.disconnect()
        holder.disconnect()
        time.sleep(0.3)
    finally:
        sampler.stop()
    rows = sampler.rows(slot)
    firsts = [i for i, (kind, _, _) in enumerate(rows) if kind == int(StepType.FIRST)]
    assert len(firsts) >= 2, [r[0] for r in rows]  # the dropped client's episode and the new one's
    dropped_mid = [r[2] for r in rows[firsts[0] + 1 : firsts[1]] if r[0] == int(StepType.MID)]
    assert np.abs(dropped_mid[-1]).max() > 1e-3  # the first client's state had moved ...
    assert not rows[firsts[1]][2].any()  # ... and the new client's first step starts from zeros
    assert np.abs(rows[firsts[1] + 1][2]).max() > 1e-3  # after which its own state moves on
