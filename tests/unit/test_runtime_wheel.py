"""What the runtime's wheel ships beside its modules."""

from __future__ import annotations

import zipfile
from pathlib import Path

from harbor_openenv.helper import contract
from harbor_openenv.sandbox.files import load_script

SCRIPTS = Path(__file__).parents[2] / "runtime/src/harbor_openenv/sandbox/scripts"
HELPER = Path(__file__).parents[2] / "runtime/src/harbor_openenv/helper"


def test_the_wheel_ships_its_type_marker_and_in_container_scripts(runtime_wheel):
    names = set(zipfile.ZipFile(runtime_wheel).namelist())
    assert "harbor_openenv/py.typed" in names
    scripts = sorted(p.name for p in SCRIPTS.glob("*.sh"))
    assert scripts, SCRIPTS
    for name in scripts:
        assert f"harbor_openenv/sandbox/scripts/{name}" in names
        assert load_script(name.removesuffix(".sh")).strip()


def test_the_wheel_ships_the_helper_its_sources_and_its_contract(runtime_wheel):
    """Both architectures' binaries (build artifacts), every C source the build hook compiled,
    and contract.h, which the runtime reads at import (harbor_openenv.helper.contract)."""
    wheel = zipfile.ZipFile(runtime_wheel)
    names = set(wheel.namelist())
    for arch in ("x86_64", "aarch64"):
        binary = wheel.read(f"harbor_openenv/helper/harbor-openenv-helper-{arch}")
        assert binary.startswith(b"\x7fELF"), arch
    sources = sorted(p.name for p in HELPER.glob("*.[ch]"))
    assert "contract.h" in sources and "main.c" in sources
    for name in sources:
        assert wheel.read(f"harbor_openenv/helper/{name}") == (HELPER / name).read_bytes()
    assert "harbor_openenv/helper/contract.py" in names
    shipped = contract.parse(wheel.read("harbor_openenv/helper/contract.h").decode())
    assert shipped == contract.DEFINES
