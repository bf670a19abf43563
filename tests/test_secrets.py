"""Secrets never reach a file in clear (issue 17): run folders, checkpoints and tune state are redacted."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rlgear import config as config_mod
from rlgear.errors import ConfigError
from rlgear.external.client import Client
from rlgear.run.runner import run
from rlgear.scheduler import Trial
from rlgear.tune import experiment_state as es
from tests.test_external_learning import ROOT, _wait_address

TOKEN = "s3cr3t-token-XYZ"


def test_secret_keys_are_redacted_at_any_depth_and_nothing_else_is():
    config = {
        "env": {
            "kwargs": {
                "token": TOKEN,
                "token_env": "MY_TOKEN_VAR",  # the name of a variable, not a secret
                "db": {"password": "p", "user": "u"},
                "plugins": [{"api_key": "k", "wandb_api_key": "w"}, {"name": "x"}],
                "refresh_token": None,  # nothing to hide
                "hub_token": "h",  # README: names like *_token are secrets too
            }
        },
        "training": {"lr": 0.001},
    }
    redacted = config_mod.redact_secrets(config)
    kwargs = redacted["env"]["kwargs"]
    assert kwargs["token"] == kwargs["db"]["password"] == kwargs["hub_token"] == config_mod.REDACTED
    assert kwargs["plugins"][0] == {"api_key": config_mod.REDACTED, "wandb_api_key": config_mod.REDACTED}
    assert kwargs["token_env"] == "MY_TOKEN_VAR" and kwargs["db"]["user"] == "u"
    assert kwargs["refresh_token"] is None and redacted["training"] == {"lr": 0.001}
    assert config["env"]["kwargs"]["token"] == TOKEN  # a copy: the run keeps its secret
    assert TOKEN not in config_mod.dump_yaml(config)
    assert config_mod.restore_secrets(redacted, config) == config


def test_tune_state_redacts_trial_configs(tmp_path):
    trial = Trial(config={"env": {"kwargs": {"token": TOKEN}}}, trial_id="t0", logdir=str(tmp_path / "t0"))
    trial.checkpoint_config = {"env": {"kwargs": {"token": TOKEN}}}
    es.write_state(tmp_path, [es.dump_trial(trial)], {})
    text = "".join(p.read_text() for p in tmp_path.iterdir() if p.is_file())
    assert TOKEN not in text and config_mod.REDACTED in text


def play_until_closed(address: str, token: str, stop: threading.Event) -> None:
    """One client playing short fake episodes until the server goes away."""
    while not stop.is_set():
        try:
            client = Client(address, token=token, reconnect_timeout_s=5.0)
            while not stop.is_set():
                client.init(np.zeros(4, np.float32))
                for _ in range(5):
                    client.send(1.0, np.zeros(4, np.float32))
                client.send(1.0, np.zeros(4, np.float32), terminated=True)
        except Exception:  # the server stopped (or restarts): try again until told to stop
            stop.wait(0.1)


def served(tmp_path, token: str, *overrides: str):
    address_file = tmp_path / "address"
    address_file.unlink(missing_ok=True)
    return config_mod.load(
        ROOT / "configs" / "ppo-cartpole-external.yaml",
        [
            "env.kwargs.port=0",
            f"env.kwargs.address_file={address_file}",
            f"env.kwargs.token={token}",
            "env.kwargs.min_clients=1",
            "workers.num_envs_per_worker=2",
            "training.min_env_steps_per_iteration=256",
            f"logging.dir={tmp_path / 'runs'}",
            "logging.tensorboard=true",
            "logging.progress=none",
            "checkpoint.every=1",
            *overrides,
        ],
    ), address_file


def run_with_a_client(config, address_file, token: str, resume=None):
    stop = threading.Event()

    def start_client():
        player = threading.Thread(target=play_until_closed, args=(_wait_address(address_file), token, stop))
        player.daemon = True
        player.start()

    threading.Thread(target=start_client, daemon=True).start()
    try:
        return run(config, resume=resume)
    finally:
        stop.set()


def test_a_token_is_in_no_file_of_a_run_and_a_resume_needs_it_given_again(tmp_path):
    config, address_file = served(tmp_path, TOKEN, "stop={training_iteration: 2}")
    run_with_a_client(config, address_file, TOKEN)
    (run_dir,) = (tmp_path / "runs").iterdir()
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "config.yaml" for p in files) and len(files) > 4
    leaks = [str(p) for p in files if TOKEN.encode() in p.read_bytes()]
    assert leaks == []
    assert f"token: {config_mod.REDACTED}" in (run_dir / "config.yaml").read_text()

    # Resuming with the config (token included) works and continues from the checkpoint.
    again, address_file = served(tmp_path, TOKEN, "stop={training_iteration: 3}")
    result = run_with_a_client(again, address_file, TOKEN, resume=run_dir)
    assert result["training_iteration"] == 3
    assert not [str(p) for p in run_dir.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]

    # The run folder's own config has no token to give: starting from it names the key.
    saved = config_mod.load(run_dir / "config.yaml")
    with pytest.raises(ConfigError, match=r"env\.kwargs\.token: .*redacted.*token_env"):
        run(saved, resume=run_dir)
