"""Writes the DQN policy states that tests/test_dqn_checkpoint_format.py restores.

They were written by the policies of commit eccce71, before DQN's target network moved to
the backends' ``TargetModel``, so the test proves that a checkpoint of that layout (weight
and target-weight names, optimizer state, generators) keeps loading. Run it again only to
add a case, never to "fix" a failing test: the files stand for checkpoints users have.

    python tests/data/dqn-policy-state/make_fixtures.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1]))

from test_dqn_checkpoint_format import CASES, learned_policy  # noqa: E402


def main() -> None:
    for backend in ("torch", "tf"):
        for case in CASES:
            state = learned_policy(backend, case).get_state()
            arrays = {k: np.ascontiguousarray(v) for k, v in state.arrays.items()}
            save_file(arrays, HERE / f"{backend}-{case}.safetensors")
            (HERE / f"{backend}-{case}.json").write_text(json.dumps(state.meta, indent=1))


if __name__ == "__main__":
    main()
