"""What the runtime's wheel ships beside its modules."""

from __future__ import annotations

import zipfile
from pathlib import Path

from harbor_openenv.sandbox.files import load_script

SCRIPTS = Path(__file__).parents[2] / "runtime/src/harbor_openenv/sandbox/scripts"


def test_the_wheel_ships_its_type_marker_and_in_container_scripts(runtime_wheel):
    names = set(zipfile.ZipFile(runtime_wheel).namelist())
    assert "harbor_openenv/py.typed" in names
    scripts = sorted(p.name for p in SCRIPTS.glob("*.sh"))
    assert scripts, SCRIPTS
    for name in scripts:
        assert f"harbor_openenv/sandbox/scripts/{name}" in names
        assert load_script(name.removesuffix(".sh")).strip()
