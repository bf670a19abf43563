"""The wheel ships `rlgear` and `rlgear.plugins`, not top-level `core`/`plugins` packages."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_maps_core_to_rlgear_and_registers_entry_points(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("rlgear-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert "rlgear" in top_level
    assert "core" not in top_level and "plugins" not in top_level
    for module in (
        "rlgear/__init__.py",
        "rlgear/value_ops.py",
        "rlgear/plugins/algorithms/ppo/torch_policy.py",
        "rlgear/plugins/backends/torch/policy.py",
        "rlgear/plugins/envs/gymnasium_env.py",
        "rlgear/plugins/schedulers/fifo.py",
    ):
        assert module in names, f"{module} missing from the wheel"
    for source_dir, package in (("core", "rlgear"), ("plugins", "rlgear/plugins")):
        for module in (ROOT / source_dir).rglob("*.py"):
            shipped = f"{package}/{module.relative_to(ROOT / source_dir).as_posix()}"
            assert shipped in names, f"{shipped} is missing from the wheel: list its package in setup.cfg"
    templates = sorted((ROOT / "core" / "cli" / "templates").rglob("*.tmpl"))  # what `rlgear new` renders
    assert len(templates) >= 4
    for template in templates:
        shipped = f"rlgear/{template.relative_to(ROOT / 'core').as_posix()}"
        assert shipped in names, f"{shipped} is missing from the wheel: add it to package_data in setup.cfg"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    for group in (
        "rlgear.algorithms",
        "rlgear.envs",
        "rlgear.backends",
        "rlgear.schedulers",
        "console_scripts",
    ):
        assert f"[{group}]" in text


def test_the_offline_extra_installs_what_minaris_hdf5_storage_imports():
    """minari's HDF5 storage imports PIL at import time, but minari[hdf5] does not require pillow:
    a venv with only ``rlgear[torch,offline]`` failed to record a dataset ("No module named 'PIL'")
    until the extra listed it. Read from minari's own source, so a minari that stops importing PIL
    (or starts importing something else unlisted) shows up here."""
    import configparser
    import importlib.util

    spec = importlib.util.find_spec("minari")
    if spec is None:
        pytest.skip("needs the offline extra: pip install 'rlgear[offline]'")
    storage = Path(spec.origin).parent / "dataset" / "_storages" / "hdf5_storage.py"
    source = storage.read_text()
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    offline = [line.strip().lower() for line in parser["options.extras_require"]["offline"].splitlines()]
    if "from PIL import" in source or "import PIL" in source:
        assert "pillow" in offline, offline
