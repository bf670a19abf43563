"""Config keys that were renamed: still read, with one warning per process naming the new key.

Why: a config file written for an older rlgear should keep working for a
release while its author moves to the new name, and a saved run folder
(``--resume``) or checkpoint (``rlgear evaluate``) written with the old name
must still load. Giving both names is a mistake (which one wins?), so it is
an error naming both.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from rlgear.errors import ConfigError

#: section -> {old key: new key}; the old names stop working in 0.3.
RENAMED = {"training": {"adam_epsilon": "optimizer_epsilon"}}

#: section -> {key: default} of keys added since 0.1 whose default changes nothing: a run saved
#: before they existed resumes (its saved config is compared with the given one, key by key).
ADDED = {"training": {"optimizer_kwargs": {}}}

_warned: set[str] = set()


def rename_keys(
    raw: dict[str, Any],
    fail: Callable[[str, str], ConfigError],
    origins: dict[str, str] | None = None,
    warn: bool = True,
    declared: Mapping[str, Any] | None = None,
) -> None:
    """Move every renamed key of ``raw`` (a whole config mapping) to its new name, in place.

    ``declared``: section -> the keys its config class declares. A key the class declares is its
    own, not an old name (ES's ``training.adam_epsilon`` is its Adam's, kept by that name), so it
    is not renamed.

    ``origins`` (``--set`` texts by key path) follow the key, so a later error in
    its value still blames the ``--set`` that gave it. Warns once per old key
    and process (a ``FutureWarning``: shown by default, it is the user's config).
    """
    for section, renames in RENAMED.items():
        mapping = raw.get(section)
        if not isinstance(mapping, Mapping):
            continue
        mapping = dict(mapping)
        own = (declared or {}).get(section, ())
        for old, new in renames.items():
            if old not in mapping or old in own:
                continue
            if new in mapping:
                raise fail(
                    f"{section}.{old}",
                    f"renamed {section}.{new}, which is given too; remove {section}.{old}",
                )
            mapping[new] = mapping.pop(old)
            if origins is not None and f"{section}.{old}" in origins:
                origins[f"{section}.{new}"] = origins.pop(f"{section}.{old}")
            if warn and f"{section}.{old}" not in _warned:
                _warned.add(f"{section}.{old}")
                warnings.warn(
                    f"{section}.{old} is deprecated: it was renamed {section}.{new} (same meaning); "
                    "write the new name, the old one stops working in rlgear 0.3",
                    FutureWarning,
                    stacklevel=4,
                )
        raw[section] = mapping


def upgrade_saved(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved config (a run's ``config.yaml``) with renamed keys under their new names, silently,
    and the keys of :data:`ADDED` filled in where it predates them.

    For comparing a run's saved config with the one it is resumed with.
    """
    out = dict(saved)

    def fail(path: str, message: str) -> ConfigError:
        return ConfigError(f"saved config: {path}: {message}")

    rename_keys(out, fail, warn=False)
    for section, added in ADDED.items():
        if isinstance(out.get(section), Mapping):
            out[section] = {**added, **out[section]}
    return out
