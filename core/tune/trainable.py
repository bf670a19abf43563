"""Ray Tune interop: every rlgear algorithm as a ``ray.tune.Trainable``.

Users who already live in Ray Tune keep their tooling::

    from ray import tune
    import rlgear

    tuner = tune.Tuner(
        rlgear.get_trainable("ppo"),
        param_space={"env": {"name": "CartPole-v1"}, "training": {"lr": tune.loguniform(1e-4, 1e-2)}},
        run_config=tune.RunConfig(stop={"training_iteration": 10}),
    )
    tuner.fit()

``param_space`` is an rlgear config mapping (``algorithm`` may be left out);
Tune's own schedulers (its PBT included) call ``reset_config`` and restore
exactly as rlgear's do. Ray is imported only when ``get_trainable`` is called.
"""

from __future__ import annotations

import os
from typing import Any

from rlgear.discovery import registry
from rlgear.errors import PluginError

CHECKPOINT_SUBDIR = "rlgear_checkpoint"
_cache: dict[str, type] = {}


def get_trainable(name: str) -> type:
    """A ``ray.tune.Trainable`` subclass running rlgear algorithm ``name`` (cached per name)."""
    if name in _cache:
        return _cache[name]
    trainer_cls = registry.load_algorithm(name)  # unknown names fail here, with the installed list
    try:
        from ray import tune
    except ImportError as err:
        raise PluginError(
            "rlgear.get_trainable needs Ray Tune, which is not installed: pip install 'rlgear[ray]'"
        ) from err

    def _with_algorithm(config: dict[str, Any]) -> dict[str, Any]:
        config = dict(config)
        given = config.setdefault("algorithm", name)
        if given != name:
            raise PluginError(f"param_space.algorithm is '{given}', but this trainable runs '{name}'")
        return config

    class RLGearTrainable(tune.Trainable):
        """Wraps one rlgear Trainer: setup/step/save_checkpoint/load_checkpoint/reset_config/cleanup."""

        def setup(self, config: dict[str, Any]) -> None:
            self.trainer = trainer_cls(_with_algorithm(config))

        def step(self) -> dict[str, Any]:
            result = dict(self.trainer.train())
            # Tune keeps its own iteration counter; rlgear's (restored from checkpoints) is reported too.
            result["rlgear_training_iteration"] = result.pop("training_iteration")
            return result

        def save_checkpoint(self, checkpoint_dir: str) -> None:
            self.trainer.save(os.path.join(checkpoint_dir, CHECKPOINT_SUBDIR))

        def load_checkpoint(self, checkpoint: Any) -> None:
            self.trainer.restore(os.path.join(checkpoint, CHECKPOINT_SUBDIR))

        def reset_config(self, new_config: dict[str, Any]) -> bool:
            return bool(self.trainer.reset_config(_with_algorithm(new_config)))

        def cleanup(self) -> None:
            self.trainer.stop()

    RLGearTrainable.__name__ = RLGearTrainable.__qualname__ = f"RLGear_{name}"
    _cache[name] = RLGearTrainable
    return RLGearTrainable
