"""Checkpoints of policies on structured spaces: the env's raw spaces are stored, the policy is
rebuilt with the preprocessed one, masks are honoured, and a torch checkpoint evaluates
identically on TF."""

from __future__ import annotations

import numpy as np
import pytest

from rlgear.cli.main import main as cli_main
from rlgear.preprocessing import ObservationPreprocessor
from rlgear.spaces import Dict, MultiDiscrete
from tests.conftest import needs_tf

pytestmark = [needs_tf, pytest.mark.filterwarnings("ignore:TensorFlow was already initialized")]

ENVS = {
    "masked": "tests.spaces_envs:MaskedChoiceEnv",
    "multi_discrete": "tests.spaces_envs:JointTargetEnv",
    "tuple": "tests.spaces_envs:TupleActionEnv",
}


def train_checkpoint(tmp_path, env_name: str):
    import rlgear

    rlgear.train(
        {
            "algorithm": "ppo",
            "backend": "torch",
            "seed": 0,
            "env": {"name": env_name, "vectorization": "sync"},
            "workers": {"num_envs_per_worker": 2},
            "training": {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2},
            "model": {"hidden_sizes": [16, 16]},
            "stop": {"training_iteration": 2},
            "logging": {"dir": str(tmp_path / "torch"), "tensorboard": False, "progress": "none"},
        }
    )
    (run_dir,) = (tmp_path / "torch").iterdir()
    return run_dir


def observations(space, rng, n=64):
    if isinstance(space, Dict):  # the masked-choice env's Dict
        mask = rng.random((n, 4)) < 0.5
        mask[np.arange(n), rng.integers(4, size=n)] = True
        return {
            "action_mask": mask.astype(np.int8),
            "cue": rng.integers(2, size=n),
            "noise": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        }
    return rng.integers(space.n, size=n)


@pytest.mark.parametrize("kind", sorted(ENVS))
def test_a_torch_checkpoint_on_structured_spaces_evaluates_identically_on_tf(tmp_path, capsys, kind):
    from rlgear.run import agent

    run_dir = train_checkpoint(tmp_path, ENVS[kind])
    code = cli_main(["evaluate", str(run_dir), "--episodes", "2", "--set", "backend=tf"])
    out = capsys.readouterr().out
    assert code == 0 and "episodes 2 | return mean" in out, out

    original = agent.load(run_dir)
    moved = agent.load(run_dir, ["backend=tf"])
    assert type(moved.policy).__module__.endswith("tf_policy")
    raw_space = original.observation_space  # the env's own space, from the checkpoint
    prep = ObservationPreprocessor(raw_space, original.action_space)
    assert original.policy.observation_space == prep.observation_space
    obs = observations(raw_space, np.random.default_rng(0))
    np.testing.assert_allclose(
        moved.policy.action_distribution_inputs(prep.transform(obs)),
        original.policy.action_distribution_inputs(prep.transform(obs)),
        rtol=1e-5, atol=1e-5,
    )  # fmt: skip
    expected, got = original.compute_actions(obs), moved.compute_actions(obs)
    if isinstance(expected, tuple):  # Tuple actions come back structured, as the env takes them
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected)
    if kind == "masked":
        assert obs["action_mask"][np.arange(len(got)), got].all()  # greedy among allowed actions
    if kind == "multi_discrete":
        assert isinstance(original.action_space, MultiDiscrete) and got.shape == (64, 2)
    first = {k: v[0] for k, v in obs.items()} if isinstance(obs, dict) else obs[0]
    single = moved.compute_single_action(first)
    if isinstance(got, tuple):
        assert single[0] == got[0][0]
    else:
        np.testing.assert_array_equal(single, got[0])
