"""Which numpy network a checkpoint's policy is, decided without its framework.

Why here and not through the algorithm's policy class: that class imports torch or TF.
The weight names say the family (every backend saves the same framework-neutral
names) and the policy's config says the details:

* ``lstm/...``: the catalog LSTM actor-critic (``model.lstm``, ``lstm_use_prev_*``);
* ``attention/...``: the catalog attention memory (``model.attention``);
* ``relational/...``: refused (``model.relational`` has no numpy twin; it acts in its framework);
* ``policy/output`` and ``value/output``: the catalog actor-critic MLP (ppo, a2c, a3c, pg,
  impala, appo), ``model.vf_share_layers``;
* ``policy/output`` and ``critic/output``: mappo's actor, the catalog policy MLP (its centralised
  critic needs inputs a deployed agent does not have, so the runtime acts with the actor alone);
* ``policy/output`` and ``q/...``: the tanh actor of SAC (output ``2 x actions``: means, log
  stds) or TD3/DDPG (output ``actions``); with a Discrete action space, discrete SAC's
  categorical actor (output: the logits);
* ``q/...`` only: DQN's Q-network (``training.dueling``, ``num_atoms``, qrdqn's ``num_quantiles``;
  noisy layers from the weight names); refused with ``q/tau_embedding`` (iqn: its Q-values are means
  over taus sampled at every step, not a fixed function of the weights);
* a checkpoint of a framework-free algorithm (ES, ARS: backend ``numpy``): the algorithm's own
  numpy policy.

Image observations (and image-plus-vector rows) add the conv trunk of ``model.conv_filters``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgear.blocks.attention_inference import NumpyAttentionActorCritic
from rlgear.blocks.inference import NumpyActor, NumpyActorCritic
from rlgear.blocks.lstm_inference import NumpyLSTMActorCritic
from rlgear.blocks.q_inference import NumpyQNetwork
from rlgear.blocks.squashed_inference import NumpyTanhActor
from rlgear.config.conv import conv_layers
from rlgear.errors import CheckpointError, ConfigError
from rlgear.inference.policies import (
    ActorCriticRuntime,
    CategoricalActorRuntime,
    LSTMRuntime,
    QRuntime,
    TanhActorRuntime,
)
from rlgear.run.agent import CheckpointPolicy
from rlgear.spaces import Box, Discrete

#: What checkpoints of a framework-free algorithm record as their backend.
NUMPY_BACKEND = "numpy"
#: The ``Trainer.policies`` key of a framework-free policy class.
ANY_BACKEND = "*"


def build_policy(read: CheckpointPolicy) -> Any:
    """The numpy policy of ``read``, holding its weights."""
    if read.metadata.get("backend") == NUMPY_BACKEND:
        return _framework_free_policy(read)
    config = read.config
    model = config.model
    if model.custom:
        raise ConfigError(
            f"model.custom: {read.folder}: a custom network ({model.custom}) has no numpy twin; "
            "rlgear.inference runs the catalog models only (act with rlgear.load)"
        )
    names = set(read.weights)
    obs_space, action_space = read.preprocessor.observation_space, read.action_space
    conv = conv_layers(obs_space, model)
    if "relational/input/kernel" in names:
        raise ConfigError(
            f"model.relational: {read.folder}: the relational module has no numpy twin; "
            "rlgear.inference does not run it (act with rlgear.load, which runs the framework's model)"
        )
    try:
        if "attention/input/kernel" in names:  # the attention memory, through its numpy twin
            attention = NumpyAttentionActorCritic(action_space, model, None, conv)
            attention.load(read.weights, 0)
            return LSTMRuntime(obs_space, action_space, config, attention)
        if "lstm/kernel" in names:
            if not isinstance(action_space, Discrete | Box):
                raise ConfigError(
                    f"model.lstm: {read.folder}: the catalog LSTM with {action_space!r} actions is not "
                    "supported by rlgear.inference (Discrete and Box are)"
                )
            lstm = NumpyLSTMActorCritic(action_space, model, None, conv)
            lstm.load(read.weights, 0)
            return LSTMRuntime(obs_space, action_space, config, lstm)
        if "policy/output/kernel" in names and "critic/output/kernel" in names:  # mappo: the actor alone
            actor = NumpyActor(action_space, len(model.hidden_sizes), model.activation)
            actor.load(read.weights, 0)
            return ActorCriticRuntime(obs_space, action_space, config, actor)
        if "policy/output/kernel" in names and "value/output/kernel" in names:
            mlp = NumpyActorCritic(
                action_space, len(model.hidden_sizes), model.activation, bool(model.vf_share_layers),
                None, conv,
            )  # fmt: skip
            mlp.load(read.weights, 0)
            return ActorCriticRuntime(obs_space, action_space, config, mlp)
        if "policy/output/kernel" in names and any(name.startswith("q/") for name in names):
            if isinstance(action_space, Discrete):  # discrete SAC: the actor's outputs are logits
                actor = NumpyTanhActor(len(model.hidden_sizes), model.activation, False)
                actor.load(read.weights, 0)
                return CategoricalActorRuntime(obs_space, action_space, config, actor)
            return TanhActorRuntime(obs_space, action_space, config, _tanh_actor(read))
        if "q/tau_embedding/kernel" in names:  # IQN: Q is a mean over sampled taus, a generator this lacks
            raise CheckpointError(
                f"{read.folder}: policy '{read.policy_id}': an implicit quantile network (iqn, "
                "q/tau_embedding) acts on quantile fractions sampled per step, which rlgear.inference does "
                "not draw; act with rlgear.run.agent (the framework): rlgear export refuses iqn too"
            )
        if any(name.startswith("q/") for name in names):
            return QRuntime(obs_space, action_space, config, _q_network(read, conv), _timestep(read))
    except (KeyError, ValueError) as err:
        raise CheckpointError(f"{read.folder}: the checkpoint does not fit its config: {err}") from err
    raise CheckpointError(
        f"{read.folder}: policy '{read.policy_id}': no numpy runtime for weights "
        f"{', '.join(sorted(names)[:6])}... (the catalog actor-critic, LSTM, Q-network and tanh actor are known)"
    )


def _timestep(read: CheckpointPolicy) -> int:
    return int(read.meta.get("global_timestep", 0))


def _framework_free_policy(read: CheckpointPolicy) -> Any:
    """The algorithm's own framework-free policy class (``Trainer.policies["*"]``): it imports no
    framework by contract (:mod:`rlgear.numpy_policy`)."""
    from rlgear.discovery import registry

    trainer_cls = registry.load_algorithm(read.config.algorithm)
    if ANY_BACKEND not in trainer_cls.policies:
        raise CheckpointError(
            f"{read.folder}: the checkpoint's backend is '{NUMPY_BACKEND}' but algorithm "
            f"'{read.config.algorithm}' has no framework-free policy"
        )
    policy = trainer_cls.policy_class(ANY_BACKEND)(
        read.preprocessor.observation_space, read.action_space, read.config
    )
    try:
        policy.set_weights(read.weights)
    except ValueError as err:
        raise CheckpointError(f"{read.folder}: the checkpoint does not fit the config: {err}") from err
    policy.global_timestep = _timestep(read)
    return policy


def _tanh_actor(read: CheckpointPolicy) -> NumpyTanhActor:
    action_space = read.action_space
    if not isinstance(action_space, Box) or len(action_space.shape) != 1 or not action_space.bounded:
        raise CheckpointError(f"{read.folder}: a tanh actor needs a bounded 1-D Box, got {action_space!r}")
    width = np.shape(read.weights["policy/output/bias"])[0]
    if width not in (action_space.size, 2 * action_space.size):
        raise CheckpointError(
            f"{read.folder}: policy/output has {width} outputs; a tanh actor for {action_space!r} has "
            f"{action_space.size} (TD3, DDPG) or {2 * action_space.size} (SAC: means and log stds)"
        )
    model = read.config.model
    actor = NumpyTanhActor(len(model.hidden_sizes), model.activation, width == 2 * action_space.size)
    actor.load(read.weights, 0)
    return actor


def _q_network(read: CheckpointPolicy, conv: Any) -> NumpyQNetwork:
    action_space, training = read.action_space, read.config.training
    if not isinstance(action_space, Discrete):
        raise CheckpointError(f"{read.folder}: a Q-network needs Discrete actions, got {action_space!r}")
    num_atoms = int(getattr(training, "num_atoms", 1))
    num_quantiles = int(getattr(training, "num_quantiles", 0))  # qrdqn: N quantiles per action
    support = None
    if num_quantiles > 0:
        num_atoms = num_quantiles
    elif num_atoms > 1:  # the backends' C51 support (linspace in float64, then float32)
        support = np.linspace(training.v_min, training.v_max, num_atoms, dtype=np.float64).astype(np.float32)
    model = read.config.model
    net = NumpyQNetwork(
        action_space.n, len(model.hidden_sizes), model.activation, bool(getattr(training, "dueling", False)),
        num_atoms, support, conv, quantiles=num_quantiles > 0,
    )  # fmt: skip
    net.load(read.weights)
    return net
