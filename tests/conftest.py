"""Shared fixtures and options of every layer: the Docker engine (required, never skipped), the
sandbox and servers on it, and the runtime's wheels. Each layer's own conftest.py marks its tests
(``pytest -m unit`` and so on); what the tests import lives in tests/support/."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from _images import build_runtime_wheel, image_python
from _server import (
    AGENT_ACTIONS,
    BASE_IMAGES,
    CACHE,
    CHANNEL_VARIABLE,
    CODEX_PLATFORMS,
    CODEX_VERSION,
    FIXTURE_TASKS,
    ROOT,
    Server,
    exec_channel_on,
)


def pytest_addoption(parser):
    parser.addoption(
        "--exec-channel",
        choices=("0", "1"),
        default="1",
        help="1 (default): agent actions use the exec channel, in servers and in bare_sandbox;"
        " 0: engine exec only (scripts/test reruns the sandbox and hostile suites so)",
    )

    parser.addoption(
        "--remote-engine",
        action="store_true",
        help="run against an engine of the tests' own reached by TCP with TLS (a dockerd on"
        " 127.0.0.1 with the base images): every fixture, runtime and server of the run uses it"
        " by Docker's own settings (scripts/test reruns the hostile suite so)",
    )


def pytest_configure(config):
    # Servers started by the tests inherit this process's environment (launch.Server).
    os.environ[CHANNEL_VARIABLE] = config.getoption("--exec-channel")


# The modules whose few tests take minutes each (CI's --durations: the road about 10 minutes, the
# update about 3), first: with a module on one xdist worker (loadscope), the longest started
# last would leave the other worker idle to the end. The rest follow by number of tests, as
# xdist's own reorder would put them (scripts/test turns that off: --no-loadscope-reorder).
LONG_MODULES = ("tests/template/test_road.py", "tests/template/test_update.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    counts = Counter(item.nodeid.split("::")[0] for item in items)

    def rank(item: pytest.Item) -> tuple[int, int, str]:
        module = item.nodeid.split("::")[0]
        first = LONG_MODULES.index(module) if module in LONG_MODULES else len(LONG_MODULES)
        return first, -counts[module], module

    items.sort(key=rank)  # stable: a module's tests keep their order


@pytest.fixture(scope="session", autouse=True)
def remote_engine_of_the_run(request) -> Iterator[None]:
    """With ``--remote-engine``: a TLS engine for this test process, named by ``DOCKER_HOST``,
    ``DOCKER_TLS_VERIFY`` and ``DOCKER_CERT_PATH`` from the first test on (the machine's engine
    only gives it the base images); stopped after the last."""
    if not request.config.getoption("--remote-engine"):
        yield
        return
    import docker
    from _engines import EngineError
    from _remote import remote_engine

    try:
        with remote_engine(docker.from_env(timeout=300), f"run-{os.getpid()}") as engine:
            saved = {name: os.environ.get(name) for name in engine.tls_env}
            os.environ.update(engine.tls_env)
            try:
                yield
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
    except EngineError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def docker_client():
    """The engine Docker's settings name (the machine's, or ``--remote-engine``'s), by the
    runtime's own client. Tests that need it fail (never skip) when it is unreachable."""
    from harbor_openenv.sandbox import engine

    try:
        client = engine.connect(concurrency=16)
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
    from harbor_openenv.sandbox.spec import ContainerSpec
    from harbor_openenv.sandbox.starter import DockerStarter

    owner = f"test-{request.module.__name__}-{os.getpid()}"
    backend = DockerStarter(lambda: docker_client, owner=owner)
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


@pytest.fixture(scope="session")
def server(docker_client) -> Iterator[Server]:
    """One server over the fixture tasks, shared by the tests that do not restart it."""
    srv = Server(FIXTURE_TASKS, HARBOR_OPENENV_MAX_SESSIONS="12")
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def runtime_wheel(tmp_path_factory) -> Path:
    """A wheel of the runtime as it is in this checkout."""
    return build_runtime_wheel(ROOT / "runtime", tmp_path_factory.mktemp("runtime-wheel"))


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
    folder.parent.mkdir(parents=True, exist_ok=True)
    # One filler at a time: pytest-xdist's workers (and other checkouts' runs) share the cache.
    with open(CACHE / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _fill_wheels(folder, runtime_wheel)
    return folder


def _fill_wheels(folder: Path, runtime_wheel: Path) -> None:
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


@pytest.fixture(scope="session")
def codex_package(docker_client) -> Path:
    """The npm pack of Codex's build for the engine's architecture, fetched once into .cache
    (about 170 MB; one fetcher at a time)."""
    platform = CODEX_PLATFORMS[docker_client.info()["Architecture"]]
    CACHE.mkdir(exist_ok=True)
    pack = CACHE / f"openai-codex-{CODEX_VERSION}-{platform}.tgz"
    with open(CACHE / "codex.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not pack.exists():
            subprocess.run(
                ["npm", "pack", "--silent", f"@openai/codex@{CODEX_VERSION}-{platform}"],
                cwd=CACHE,
                check=True,
                capture_output=True,
            )
    return pack


@pytest.fixture(scope="session")
def harness_cache(docker_client) -> Path:
    """The harness cache (``harbor-openenv harnesses fill``) of every cached harness at its pinned
    version, glibc and musl builds for the engine's architecture, and terminus-2's portable tmux,
    filled as `harbor-openenv harnesses fill` fills it (about 2.3 GB: claude-code 753 MB, aider
    711 MB, opencode 362 MB, node and the Node harnesses 460 MB; one filler at a time). It is
    the machine's, in ~/.cache/harbor-openenv/harnesses beside Harbor's venv, so a clean clone
    does not fetch it again; a harness whose pinned version changed is filled again."""
    from harbor_openenv.harness.cache import BUILDS, MANIFEST, RUNTIMES, host_platforms

    shared = Path.home() / ".cache" / "harbor-openenv"
    folder = shared / "harnesses"
    platforms = host_platforms(docker_client.info()["Architecture"])
    platform_args = [arg for p in platforms for arg in ("--platform", p)]
    fill = [sys.executable, "-m", "harbor_openenv.cli", "harnesses", "fill", str(folder)]
    shared.mkdir(parents=True, exist_ok=True)
    with open(shared / "harnesses.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, build in BUILDS.items():
            manifest = folder / name / MANIFEST
            if manifest.is_file() and f'"version": "{build.version}"' in manifest.read_text():
                continue
            subprocess.run([*fill, name, *platform_args], check=True)
        for name in RUNTIMES:
            if not (folder / name / MANIFEST).is_file():
                subprocess.run([*fill, name], check=True)
    return folder
