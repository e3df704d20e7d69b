"""Shared fixtures: the Docker engine (required, never skipped) and live runtime servers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
TOKEN = "test-orchestration-token"
# The stand-in base images the fixture Dockerfiles start FROM; .ci/standin-images.sh builds them
# from debootstrap and tags them with these names where the real images are missing.
BASE_IMAGES = ("debian:bookworm-slim", "python:3.12-slim")


@pytest.fixture(scope="session")
def docker_client():
    """The local engine. Tests that need it fail (never skip) when it is unreachable."""
    import docker

    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except Exception as exc:
        pytest.fail(f"these tests need a running Docker engine (see .ci/run): {exc}")
    missing = [name for name in BASE_IMAGES if not _has_image(client, name)]
    if missing:
        pytest.fail(f"base images {missing} are missing: run .ci/standin-images.sh")
    return client


def _has_image(client, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A runtime server in its own process, on 127.0.0.1."""

    def __init__(self, tasks: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environ = {
            **os.environ,
            "HARBOR_OPENENV_TASKS": str(tasks),
            "HARBOR_OPENENV_ORCHESTRATION_TOKEN": TOKEN,
            **env,
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "harbor_openenv.app:build_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self._wait_healthy()

    def _wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.process.stdout.read().decode(errors="replace")
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{output}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not become healthy")

    @property
    def owner_prefix(self) -> str:
        return f"{socket.gethostname()}:{self.process.pid}:"

    def client(self, **kwargs):
        from harbor_openenv.client import HarborEnvClient

        return HarborEnvClient(self.url, orchestration_token=TOKEN, **kwargs)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()


@pytest.fixture(scope="session")
def server(docker_client) -> Iterator[Server]:
    """One server over the fixture tasks, shared by the tests that do not restart it."""
    srv = Server(FIXTURE_TASKS, HARBOR_OPENENV_MAX_SESSIONS="12")
    yield srv
    srv.stop()


def runtime_containers(client, owner_prefix: str | None = None) -> list:
    """This runtime's containers, optionally only those of one server process."""
    containers = client.containers.list(all=True, filters={"label": "harbor-openenv"})
    if owner_prefix is None:
        return containers
    return [c for c in containers if c.labels["harbor-openenv.owner"].startswith(owner_prefix)]


def wait_until(predicate, timeout: float = 20, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
