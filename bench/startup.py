"""Overhead: seconds from launching ``rlgear train`` to its first finished iteration.

Launches ``python -m rlgear train configs/ppo-cartpole.yaml`` with plain
progress and times the first progress line (printed right after iteration 1),
next to the cost of starting Python and of ``import torch`` measured in the
same run. Target: < 3 s. Usage: python bench/startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import launch


def python_start(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    first, bare, torch_import = [], [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            run = launch(
                [
                    "train", "configs/ppo-cartpole.yaml", "--progress", "plain",
                    "--set", f"logging.dir={tmp}", "--set", "stop={training_iteration: 1}",
                ],
                first_line_prefix="iter",
            )  # fmt: skip
        first.append(run["first_line_s"])
        bare.append(python_start("pass"))
        torch_import.append(python_start("import torch"))
    print(
        json.dumps(
            {
                "launch_to_first_result_s": round(statistics.median(first), 2),
                "target_s": 3.0,
                "python_start_s": round(statistics.median(bare), 3),
                "python_import_torch_s": round(statistics.median(torch_import), 2),
                "all_launch_to_first_result_s": [round(x, 2) for x in first],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
