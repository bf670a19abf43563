"""Built-in exploration plugins (entry-point group ``rlgear.exploration``; contract: :mod:`rlgear.exploration`)."""

from rlgear.exploration import REWARD_MODE, VALUE_MODE

#: What ``rnd`` and ``icm`` declare (``Exploration.algorithms``): value mode with the GAE family,
#: reward mode with the DQN and V-trace families (the latter have no GAE advantages to mix an
#: intrinsic value into); each shown solving ``rlgear/DeepChain-v0`` where it fails alone
#: (tests/test_learning_exploration.py).
BUILT_IN_ALGORITHMS = {
    "ppo": VALUE_MODE,
    "a2c": VALUE_MODE,
    "trpo": VALUE_MODE,
    "dqn": REWARD_MODE,
    "qrdqn": REWARD_MODE,
    "iqn": REWARD_MODE,
    "impala": REWARD_MODE,
    "appo": REWARD_MODE,
}
