"""Secrets in config files: which keys hold one, and their redaction in every file rlgear writes.

Run folders, checkpoints and experiment folders get copied, shared and uploaded, so a
secret (``token``, ``*_password``, ``api_key`` ...) is written as :data:`REDACTED`
(:func:`redact_secrets`, applied by :func:`rlgear.config.dump_yaml`), and taken back
from the config a run is given when it resumes (:func:`restore_secrets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: What a secret's value becomes in every file rlgear writes (run, checkpoint and experiment configs).
REDACTED = "<redacted>"
_SECRET_NAMES = {
    "token", "password", "passwd", "secret", "api_key", "apikey", "access_key", "secret_key",
    "private_key", "credentials", "auth_token",
}  # fmt: skip
_SECRET_SUFFIXES = ("_token", "_secret", "_password", "_api_key", "_apikey", "_credentials")


def is_secret_key(name: Any) -> bool:
    """Whether a config key holds a secret, by its name (``token``, ``*_password``, ``api_key`` ...).

    Names of environment variables that hold a secret (``token_env``) are not secrets.
    """
    key = str(name).lower()
    return key in _SECRET_NAMES or key.endswith(_SECRET_SUFFIXES)


def redact_secrets(data: Any) -> Any:
    """A copy of ``data`` with the value of every secret key, at any depth, replaced by :data:`REDACTED`.

    Why: run folders and checkpoints get copied, shared and uploaded; a token in
    a config file there would leak with them. A run that needs the secret again
    (``--resume``) takes it from the config it is given, or from ``token_env``.
    """
    if isinstance(data, Mapping):
        return {
            k: (REDACTED if is_secret_key(k) and v is not None else redact_secrets(v))
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        return [redact_secrets(v) for v in data]
    return data


def restore_secrets(saved: Any, given: Any) -> Any:
    """``saved`` with each :data:`REDACTED` value taken back from ``given`` at the same path, if it has one."""
    if isinstance(saved, Mapping):
        given_map = given if isinstance(given, Mapping) else {}
        out = {}
        for key, value in saved.items():
            if value == REDACTED and key in given_map and given_map[key] != REDACTED:
                out[key] = given_map[key]
            else:
                out[key] = restore_secrets(value, given_map.get(key))
        return out
    if isinstance(saved, list):
        return [
            restore_secrets(v, given[i] if isinstance(given, list) and i < len(given) else None)
            for i, v in enumerate(saved)
        ]
    return saved
