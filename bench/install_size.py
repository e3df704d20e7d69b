"""What each install of the runtime costs: site-packages size and packages, in fresh venvs.

Builds the runtime wheel from this checkout, installs it with uv into one fresh venv per extra
(core, client, server, and openenv alone for comparison) and prints a table. uv's cache makes
repeat runs quick; the sizes are of the installed files, not of downloads. Run from the
repository root:

    .venv/bin/python bench/install_size.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def site_packages_mb(venv: Path) -> float:
    total = 0
    for folder, _, files in os.walk(next(venv.glob("lib/python*/site-packages"))):
        for name in files:
            path = Path(folder, name)
            if not path.is_symlink():
                total += path.stat().st_size
    return total / 1e6


def install(tmp: Path, name: str, requirement: str) -> tuple[float, int]:
    venv = tmp / name
    subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run(["uv", "pip", "install", "-q", "--python", python, requirement], check=True)
    listed = subprocess.run(
        ["uv", "pip", "list", "--python", python], capture_output=True, text=True, check=True
    ).stdout
    return site_packages_mb(venv), len(listed.splitlines()) - 2


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        subprocess.run(
            ["uv", "build", "-q", "--wheel", "--out-dir", tmp, str(ROOT / "runtime")], check=True
        )
        (wheel,) = tmp_path.glob("harbor_openenv-*.whl")
        rows = [
            ("harbor-openenv", f"harbor-openenv @ {wheel.as_uri()}"),
            ("harbor-openenv[client]", f"harbor-openenv[client] @ {wheel.as_uri()}"),
            ("harbor-openenv[server]", f"harbor-openenv[server] @ {wheel.as_uri()}"),
            ("openenv==0.10.* alone", "openenv==0.10.*"),
        ]
        print(f"{'install':<26} {'MB':>7} {'packages':>9}")
        for number, (label, requirement) in enumerate(rows):
            size, count = install(tmp_path, f"v{number}", requirement)
            print(f"{label:<26} {size:>7.1f} {count:>9}")


if __name__ == "__main__":
    main()
