"""Throwaway virtualenvs for installing a plugin package the way a user does (``pip install``).

Shared by the tests that install a third-party package and drive it through the
``rlgear`` command: the worked example, a package written against 0.1's import
paths, and the packages ``rlgear new`` scaffolds.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def make_venv_with_package(tmp_path: Path, package_dir: Path) -> Path:
    """A new virtualenv holding the package at ``package_dir`` (non-editable) and seeing this interpreter's packages.

    ``--system-site-packages`` exposes the *base* interpreter's site-packages;
    when the tests themselves run in a virtualenv, rlgear, torch and gymnasium
    live in that one's, so a ``.pth`` file adds it too (``site.addsitedir``
    also runs its ``.pth`` files, which an editable rlgear install needs).
    """
    venv = tmp_path / "venv"
    have_pip = importlib.util.find_spec("pip") is not None
    command = [sys.executable, "-m", "venv", "--system-site-packages", str(venv)]
    if have_pip:  # reuse this environment's pip (through the .pth) instead of seconds of ensurepip
        command.insert(-1, "--without-pip")
    subprocess.run(command, check=True)
    python = venv_python(venv)
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    lines = [f"import site; site.addsitedir({d!r})" for d in dirs if Path(d).is_dir()]
    (Path(purelib) / "_rlgear_test_parent_env.pth").write_text("\n".join(lines) + "\n")
    # Build from a copy: an in-tree build would leave build/ and *.egg-info in the repository.
    source = tmp_path / package_dir.name
    shutil.copytree(package_dir, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
            str(source),
        ],
        check=True,
        cwd=tmp_path,
    )
    return python


def rlgear_cli(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}  # rich tables: no truncated names
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [python, "-m", "rlgear", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"rlgear {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result
