"""Helpers for benchmarks that launch ``rlgear`` as a user would (a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def source_revision() -> str:
    """The commit measured, ``+dirty`` with uncommitted edits: a result names the code it checked."""
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout
    return (commit or "unknown") + ("+dirty" if dirty.strip() else "")


def launch(args: list[str], first_line_prefix: str | None = None) -> dict[str, Any]:
    """Run ``python -m rlgear ARGS``; return wall time, peak RSS (MB), and when a line first appeared."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlgear", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "RLGEAR_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    first_seen = None
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if first_seen is None and first_line_prefix and line.startswith(first_line_prefix):
            first_seen = time.perf_counter() - start
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"rlgear {' '.join(args)} failed ({proc.returncode}):\n" + "\n".join(lines[-20:]))
    return {
        "wall_s": wall,
        "first_line_s": first_seen,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "output": lines,
    }


def last_result(run_parent: Path) -> dict[str, Any]:
    (progress,) = run_parent.glob("*/progress.jsonl")
    return json.loads(progress.read_text().splitlines()[-1])
