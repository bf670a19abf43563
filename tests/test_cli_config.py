"""``rlgear config [ALGORITHM]``: the config reference on the command line."""

from __future__ import annotations

import dataclasses

from rlgear.cli import main
from rlgear.config import WorkersConfig
from rlgear.plugins.algorithms.dqn import DQNConfig


def test_rlgear_config_prints_every_training_key_of_an_algorithm(capsys):
    assert main(["config", "dqn"]) == 0
    out = capsys.readouterr().out
    for field in dataclasses.fields(DQNConfig):
        assert f"`training.{field.name}`" in out, field.name


def test_rlgear_config_without_an_algorithm_prints_the_other_sections(capsys):
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    for field in dataclasses.fields(WorkersConfig):
        assert f"`workers.{field.name}" in out, field.name


def test_rlgear_config_of_an_unknown_algorithm_is_a_one_line_error(capsys):
    assert main(["config", "ppoo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlgear: error: unknown algorithm 'ppoo'") and "ppo" in err


def test_a_reader_that_leaves_early_is_no_traceback():
    import subprocess
    import sys

    # 4 MB of output: far beyond a pipe's buffer, so the writer meets the closed pipe for sure
    program = (
        "import rlgear.config.reference as r; r.reference_markdown = lambda algorithm=None: 'x' * 4_000_000; "
        "from rlgear.cli import main; raise SystemExit(main(['config']))"
    )
    command = f'{sys.executable} -c "{program}" | head -c 10'
    result = subprocess.run(["bash", "-c", f"{command}; echo \" status=${{PIPESTATUS[0]}}\""],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.stdout == "xxxxxxxxxx status=0\n", result.stdout
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
