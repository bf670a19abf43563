"""External environments: a policy server that clients connect to over TCP.

``env.adapter: external`` turns each connected client (a game engine, a robot,
a simulator in another language, written with :mod:`rlgear.external.client` or from
``docs/protocol.md``) into one slot of a vector env, so every algorithm trains
from connected clients unchanged. Settings come from ``env.kwargs``
(:class:`~rlgear.plugins.envs.external.settings.ServerSettings`).
"""

from __future__ import annotations

from .settings import ServerSettings, parse_settings
from .vector_env import ExternalAdapter, ExternalVectorEnv

__all__ = ["ExternalAdapter", "ExternalVectorEnv", "ServerSettings", "parse_settings"]
