"""Checkpoints written by rlgear 0.2 (commit bc4ec55, before the Learner and the regrouped core)
restore, and continue with exactly the update 0.2 made from them.

Each folder under ``tests/data/checkpoints-0.2/`` is a checkpoint that the 0.2 code wrote after one
iteration; ``expected.json`` holds the digest of the weights that 0.2 had after restoring it into a
fresh trainer and training one more iteration (``make_fixtures.py`` there), and the fingerprint of
those weights (sums, sums of squares, random projections) that 0.2's code gave on a second machine
whose floating point differs. Restoring goes through the same path as ``rlgear train --resume``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import needs_tf

FIXTURES = Path(__file__).parent / "data" / "checkpoints-0.2"
_spec = importlib.util.spec_from_file_location("checkpoint_fixtures_0_2", FIXTURES / "make_fixtures.py")
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)


@pytest.mark.parametrize(
    "case", [pytest.param(case, marks=needs_tf) if "-tf" in case else case for case in fixtures.CASES]
)
def test_a_0_2_checkpoint_restores_and_makes_the_same_next_update(case, tmp_path):
    from rlgear.discovery import registry

    expected = json.loads((FIXTURES / case / "expected.json").read_text())
    config = fixtures.config_for(case, tmp_path)
    trainer = registry.load_algorithm(config["algorithm"])(config)
    try:
        trainer.restore(FIXTURES / case)
        assert trainer.iteration == 1
        trainer.train()
        if fixtures.weights_digest(trainer) == expected["weights_after_one_more_iteration"]:
            return  # bit for bit what 0.2 did on the machine that wrote the fixtures
        # Another CPU rounds differently (29 Nov 2026: an AVX-512 Xeon gave another digest for
        # sac-torch, with this code and with stop 43's): compare with 0.2's own update on such a
        # machine, to a tolerance far below what a different update moves.
        actual = fixtures.weights_fingerprint(trainer)
        reference = expected["fingerprint_after_one_more_iteration"]
        assert sorted(actual) == sorted(reference)
        for key, values in reference.items():
            np.testing.assert_allclose(actual[key], values, rtol=1e-5, atol=1e-6, err_msg=key)
    finally:
        trainer.stop()
