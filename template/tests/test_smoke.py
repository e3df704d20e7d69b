"""Smoke test of this environment repository: the dataset copy is intact and the app imports.

Runs under pytest, or without it (as in the image): python tests/test_smoke.py
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tasks_match_manifest() -> None:
    from harbor_openenv.datasets.manifest import MANIFEST_NAME, verify_manifest

    problems = verify_manifest(ROOT / MANIFEST_NAME)
    assert not problems, "tasks/ differs from tasks.sha256:\n" + "\n".join(problems)


def test_one_version() -> None:
    """The environment's version is the same in pyproject.toml and openenv.yaml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    manifest = (ROOT / "openenv.yaml").read_text(encoding="utf-8")
    found = re.search(r"""^version: *["']?([^"'\s]+)""", manifest, re.MULTILINE)
    assert found, "openenv.yaml has no version"
    assert found.group(1) == project["version"], (
        f"openenv.yaml says version {found.group(1)}, pyproject.toml {project['version']}:"
        " make them equal"
    )


def test_app_imports() -> None:
    os.environ.setdefault("HARBOR_OPENENV_TASKS", str(ROOT / "tasks"))
    sys.path.insert(0, str(ROOT))
    from server.app import app

    assert callable(app), "server.app:app is not an ASGI application"


if __name__ == "__main__":
    failed = 0
    for name, test in list(globals().items()):
        if name.startswith("test_") and callable(test):
            try:
                test()
                print(f"ok   {name}")
            except Exception as exc:  # report every test, then fail
                failed += 1
                print(f"FAIL {name}: {exc}")
    sys.exit(1 if failed else 0)
