"""Issue 14's features together: an LSTM policy on a Dict-observation env with action masks and the
observation filter, on both backends, acting with the numpy twin and in the framework.

Each feature has its own tests; these check the joins: the preprocessor feeds the filter, the filter
feeds the recurrent policy, padded sequences carry masks that allow every action (a padding row with
no allowed action would make NaN log-probabilities), and masked actions are never taken.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlgear
from tests.conftest import small_config
from tests.spaces_envs import MaskedChoiceEnv

LSTM = {"lstm": True, "lstm_cell_size": 8, "max_seq_len": 4, "hidden_sizes": [16]}


# tf acts on masks with the numpy twin only (its compiled recurrent step refuses them: tested below)
@pytest.mark.parametrize(
    "backend, numpy_inference",
    [("torch", True), ("torch", False), ("tf", True)],
    ids=["torch-twin", "torch-framework", "tf-twin"],
)
def test_lstm_with_masks_and_the_observation_filter_trains_without_masked_actions(
    tmp_path, backend, numpy_inference
):
    if backend == "tf":
        pytest.importorskip("tensorflow", reason="the tf extra is not installed")
    MaskedChoiceEnv.violations = MaskedChoiceEnv.actions_taken = 0
    config = small_config(
        tmp_path,
        backend=backend,
        env={"name": "tests.spaces_envs:MaskedChoiceEnv", "vectorization": "sync"},
        model={**LSTM, "numpy_inference": numpy_inference, "observation_filter": "mean_std"},
        training={"train_batch_size": 96, "sgd_minibatch_size": 24, "num_sgd_iter": 2},
        stop={"training_iteration": 3},
    )
    result = rlgear.train(config)
    assert (
        result["timesteps_total"] >= 250 and MaskedChoiceEnv.actions_taken >= 250
    )  # 3 x 96 rows, less resets
    assert MaskedChoiceEnv.violations == 0
    assert np.isfinite(result["learner/total_loss"]) and np.isfinite(result["learner/entropy"])


def test_tf_compiled_recurrent_acting_refuses_masks_with_a_clear_error(tmp_path):
    pytest.importorskip("tensorflow", reason="the tf extra is not installed")
    config = small_config(
        tmp_path,
        backend="tf",
        env={"name": "tests.spaces_envs:MaskedChoiceEnv", "vectorization": "sync"},
        model={**LSTM, "numpy_inference": False},
        stop={"training_iteration": 1},
    )
    with pytest.raises(ValueError, match="numpy_inference"):
        rlgear.train(config)
