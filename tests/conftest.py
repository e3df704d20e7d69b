"""Shared fixtures: the Docker engine (required, never skipped) and live runtime servers."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harbor_openenv.client import launch

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache"
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
TOKEN = "test-orchestration-token"
# The stand-in base images the fixture Dockerfiles start FROM; .ci/standin-images.sh builds them
# from debootstrap and tags them with these names where the real images are missing.
BASE_IMAGES = ("debian:bookworm-slim", "python:3.12-slim")


CHANNEL_VARIABLE = "HARBOR_OPENENV_EXEC_CHANNEL"
AGENT_ACTIONS = ("exec", "read_file", "write_file", "list_dir")


def pytest_addoption(parser):
    parser.addoption(
        "--exec-channel",
        choices=("0", "1"),
        default="1",
        help="1 (default): agent actions use the exec channel, in servers and in bare_sandbox;"
        " 0: engine exec only (scripts/test reruns the sandbox and hostile suites so)",
    )


def pytest_configure(config):
    # Servers started by the tests inherit this process's environment (launch.Server).
    os.environ[CHANNEL_VARIABLE] = config.getoption("--exec-channel")


def exec_channel_on() -> bool:
    return os.environ.get(CHANNEL_VARIABLE, "1") == "1"


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


@pytest.fixture(scope="module")
def bare_sandbox(docker_client, request):
    """One task container per test module, started by the runtime's DockerSandbox as a task's is:
    debian:bookworm-slim, working directory /work, no network. Its agent actions (exec and the
    file actions) go through the exec channel, as a server's do, unless ``--exec-channel=0``."""
    from harbor_openenv.sandbox import remove_containers
    from harbor_openenv.sandbox.backend import DockerBackend
    from harbor_openenv.sandbox.spec import ContainerSpec

    owner = f"test-{request.module.__name__}-{os.getpid()}"
    backend = DockerBackend(lambda: docker_client, owner=owner)
    spec = ContainerSpec("debian:bookworm-slim", workdir="/work", network="none")
    sandbox = backend.start(spec, task_id=request.module.__name__)
    if exec_channel_on():
        for name in AGENT_ACTIONS:  # a call may still say channel=False
            setattr(sandbox, name, functools.partial(getattr(sandbox, name), channel=True))
    yield sandbox
    sandbox.remove()
    remove_containers(docker_client, owner=owner)  # the helper's volume too


def _has_image(client, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return True


class Server(launch.Server):
    """A runtime server in its own process, on 127.0.0.1, with the tests' token."""

    def __init__(self, tasks: Path, **env: str) -> None:
        super().__init__(tasks, token=TOKEN, **env)


@pytest.fixture(scope="session")
def server(docker_client) -> Iterator[Server]:
    """One server over the fixture tasks, shared by the tests that do not restart it."""
    srv = Server(FIXTURE_TASKS, HARBOR_OPENENV_MAX_SESSIONS="12")
    yield srv
    srv.stop()


def runtime_containers(client, owner_prefix: str | None = None) -> list:
    """This runtime's containers, optionally only those of one server process."""
    # The low-level list, which does not inspect (and 404 on) containers removed meanwhile.
    containers = client.api.containers(all=True, filters={"label": "harbor-openenv"})
    if owner_prefix is None:
        return containers
    return [
        c
        for c in containers
        if c["Labels"].get("harbor-openenv.owner", "").startswith(owner_prefix)
    ]


def wait_until(predicate, timeout: float = 20, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# -- wheels for offline image builds ---------------------------------------------------------------


def build_runtime_wheel(runtime_dir: Path, out: Path) -> Path:
    """A wheel of the runtime package in ``runtime_dir``."""
    subprocess.run(
        ["uv", "build", "--wheel", "--out-dir", str(out), str(runtime_dir)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("harbor_openenv-*.whl")
    return wheel


@pytest.fixture(scope="session")
def runtime_wheel(tmp_path_factory) -> Path:
    """A wheel of the runtime as it is in this checkout."""
    return build_runtime_wheel(ROOT / "runtime", tmp_path_factory.mktemp("runtime-wheel"))


def image_python(docker_client, image: str) -> str:
    output = docker_client.containers.run(
        image,
        ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        remove=True,
        network_mode="none",
    )
    return output.decode().strip()


@pytest.fixture(scope="session")
def dependency_wheels(docker_client, runtime_wheel) -> Path:
    """Wheels of the server extra's dependencies for the base image's Python, cached by content.

    They are fetched on the host, where the package index is reachable; the image build then
    runs with no network at all, as it would behind a firewall.
    """
    version = image_python(docker_client, "python:3.12-slim")
    host = "{}.{}".format(*sys.version_info[:2])
    if version != host:
        pytest.fail(f"the base image has Python {version}; build wheels with Python {version}")
    key = hashlib.sha256((ROOT / "runtime" / "pyproject.toml").read_bytes()).hexdigest()[:12]
    folder = CACHE / f"wheels-py{version}-{key}"
    if not (folder / ".complete").exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                # pip wheel: wheels as published, and wheels built here from sdist-only packages
                *(sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(folder)),
                f"harbor-openenv[server] @ {runtime_wheel.as_uri()}",
            ],
            check=True,
        )
        for wheel in folder.glob("harbor_openenv-*.whl"):
            wheel.unlink()  # the runtime itself comes from the rendered repo's wheels/
        sdists = [p.name for p in folder.iterdir() if not p.name.endswith((".whl", ".complete"))]
        assert not sdists, f"only wheels install offline without build tools: {sdists}"
        (folder / ".complete").touch()
    return folder


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
