"""Checkpoints written by rlgear 0.2 (commit bc4ec55, before the Learner and the regrouped core)
restore, and continue with exactly the update 0.2 made from them.

Each folder under ``tests/data/checkpoints-0.2/`` is a checkpoint that the 0.2 code wrote after one
iteration; ``expected.json`` holds the digest of the weights that 0.2 had after restoring it into a
fresh trainer and training one more iteration (``make_fixtures.py`` there). Restoring goes through
the same path as ``rlgear train --resume``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

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
        assert fixtures.weights_digest(trainer) == expected["weights_after_one_more_iteration"]
    finally:
        trainer.stop()
