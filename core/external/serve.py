"""``rlgear serve CONFIG``: train from environments that connect over the network.

The same run as ``rlgear train`` (run folder, checkpoints on schedule and on
Ctrl-C/SIGTERM, stop criteria), for a config whose ``env.adapter`` is
``external``. The env adapter prints the address it listens on; clients
(``rlgear.external.client`` or any implementation of ``docs/protocol.md``) connect
there and each plays one env slot.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rlgear import config as config_mod
from rlgear.errors import ConfigError


def serve(
    config_path: str | os.PathLike,
    overrides: Sequence[str] = (),
    resume: str | os.PathLike | None = None,
    progress: str | None = None,
) -> dict[str, Any]:
    """Load ``config_path``, check it serves external envs, and run it; returns the last result."""
    from rlgear.run.runner import run

    config = config_mod.load(config_path, overrides)
    if config.env.adapter != "external":
        raise ConfigError(
            f"{config_path}: env.adapter is '{config.env.adapter}'; rlgear serve needs env.adapter: external "
            "(clients connect over TCP). Use 'rlgear train' for other envs, or see configs/ppo-cartpole-external.yaml"
        )
    return run(config, resume=resume, progress=progress)
