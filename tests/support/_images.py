"""Wheels and images for offline builds, and an environment image served on the host network."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from _server import TOKEN, wait_until


def build_runtime_wheel(runtime_dir: Path, out: Path) -> Path:
    """A wheel of the runtime package in ``runtime_dir``."""
    subprocess.run(
        ["uv", "build", "--wheel", "--out-dir", str(out), str(runtime_dir)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("harbor_openenv-*.whl")
    return wheel


def image_python(docker_client, image: str) -> str:
    output = docker_client.containers.run(
        image,
        ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        remove=True,
        network_mode="none",
    )
    return output.decode().strip()


def add_wheels(source: Path, wheels: Path) -> None:
    """Put every wheel of ``source`` into a build context's wheels/ as real files."""
    for wheel in source.glob("*.whl"):
        try:  # Docker does not follow symlinks out of a build context
            os.link(wheel, wheels / wheel.name)
        except FileExistsError:
            pass
        except OSError:
            shutil.copy2(wheel, wheels / wheel.name)


@contextlib.contextmanager
def serve_image(docker_client, image: str, port: int):
    """Run an environment image on the host network with the Docker socket mounted; yields its
    URL and container, and stops it with SIGTERM (the server then removes its task containers)."""
    container = docker_client.containers.run(
        image,
        detach=True,
        network_mode="host",
        volumes={"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}},
        environment={"HARBOR_OPENENV_ORCHESTRATION_TOKEN": TOKEN},
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        if not wait_until(healthy, timeout=120, interval=0.5):
            container.reload()
            pytest.fail(f"server container not healthy ({container.status}):\n{container.logs()}")
        yield url, container
    finally:
        container.stop(timeout=20)
        logs = container.logs().decode(errors="replace")
        container.remove(force=True)
        print(logs[-2000:])


def build_offline(context: Path) -> tuple[str, str]:
    """``docker build`` with network "none" (only wheels/ can provide packages): tag and log."""
    tag = f"harbor-openenv-test:{uuid.uuid4().hex[:8]}"
    result = subprocess.run(
        ["docker", "build", "--network", "none", "-t", tag, str(context)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return tag, result.stdout + result.stderr
