"""MkDocs hooks of the rlgear documentation site (``hooks:`` in mkdocs.yml).

1. **Where griffe reads the package.** In the source tree ``rlgear`` is the
   folder ``core/`` and ``rlgear.plugins`` is ``plugins/``, beside it. An
   editable install maps both names with an import hook that griffe (which
   reads source files, it does not import them) follows for ``rlgear`` but not
   for ``rlgear.plugins``, so ``::: rlgear.plugins.backends.torch.TorchPolicy``
   would fail. :func:`on_config` lays the package out as a wheel installs it
   (``rlgear/`` with ``plugins/`` inside, the same copy tests/test_architecture.py
   gives import-linter) in a temporary folder and puts that folder first on the
   mkdocstrings python handler's ``paths``, with a higher event priority than
   mkdocstrings' own ``on_config``, which builds the handler (and reads ``paths``)
   right away. The reference therefore always shows
   the checkout's code, whether rlgear was installed with ``pip install -e .`` or
   ``pip install .``.
2. **The config reference** is generated at build time (:func:`on_files`): one
   page for the sections every run has, one per built-in algorithm (its
   ``training`` keys), from ``rlgear.config.reference.reference_markdown``. This
   needs rlgear installed: its entry points name the algorithms and schedulers.
   Nothing generated is committed, so it cannot go stale; tests/test_docs.py
   checks that mkdocs.yml's nav lists a page for every built-in algorithm.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = "reference/config"

_mirror: tempfile.TemporaryDirectory | None = None


def builtin_algorithms() -> list[str]:
    """Names of the algorithms rlgear itself registers (third-party ones are left out of the site)."""
    from rlgear.discovery import registry

    return sorted({p.name for p in registry.available("algorithm") if p.package == "rlgear"})


@event_priority(100)  # before mkdocstrings' own on_config, which builds the python handler
def on_config(config: Any) -> Any:
    global _mirror
    if _mirror is None:
        _mirror = tempfile.TemporaryDirectory(prefix="rlgear-docs-src-")
    package = Path(_mirror.name) / "rlgear"
    shutil.rmtree(package, ignore_errors=True)  # fresh on every (re)build of `mkdocs serve`
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "core", package, ignore=ignore)
    shutil.copytree(ROOT / "plugins", package / "plugins", ignore=ignore)
    python = config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})
    paths = [p for p in python.get("paths", []) if p != _mirror.name]
    python["paths"] = [_mirror.name, *paths]
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    from rlgear.config.reference import reference_markdown

    algorithms = builtin_algorithms()
    index = reference_markdown()
    index += "\n## `training` of each algorithm\n\n" + "\n".join(
        f"- [`{name}`]({name}.md)" for name in algorithms
    )
    index += "\n\nA third-party algorithm's keys: `python -c \"from rlgear.config.reference import "
    index += "reference_markdown; print(reference_markdown('NAME'))\"`.\n"
    files.append(File.generated(config, f"{CONFIG_DIR}/index.md", content=index))
    for name in algorithms:
        files.append(File.generated(config, f"{CONFIG_DIR}/{name}.md", content=reference_markdown(name)))
    return files


def on_shutdown() -> None:
    global _mirror
    if _mirror is not None:
        _mirror.cleanup()
        _mirror = None
