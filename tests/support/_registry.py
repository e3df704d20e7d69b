"""A real registry for the tests and benchmarks (Debian's ``docker-registry``, installed by
.ci/registry.sh) and the environment repos they push: ``serve_registry`` runs one on 127.0.0.1 at
a free port, with its own config (no auth) and storage folder, and stops it after. Engines push
to and pull from it without TLS (loopback registries need none). The images built from
``env_repo`` carry a nonce label; ``remove_ours`` removes them after."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import httpx
from _server import FIXTURE_TASKS, wait_until

from harbor_openenv.client.launch import free_port, stop_process

NONCE = f"harbor-openenv.test-registry={uuid.uuid4().hex}"
REGISTRY_BIN = "/usr/bin/docker-registry"


class RegistryError(RuntimeError):
    """The registry is missing or did not start."""


@contextlib.contextmanager
def serve_registry(folder: Path) -> Iterator[str]:
    """``HOST:PORT`` of a registry storing its data in ``folder``, stopped after."""
    if not Path(REGISTRY_BIN).is_file():
        raise RegistryError(f"{REGISTRY_BIN} is missing: run .ci/registry.sh (Debian's package)")
    port = free_port()
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    with (folder / "registry.log").open("w") as log:
        process = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=log, stderr=log)

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        if not wait_until(up, timeout=30):
            text = (folder / "registry.log").read_text()
            raise RegistryError(f"the registry did not start:\n{text}")
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(process, timeout=10)


def remove_ours(client) -> None:
    """Every image these tests built (their nonce label), whatever tags it has. Its untagged
    parents stay (noprune): they are the fixture Dockerfile's build cache, which other tests'
    builds on the same engine may be using at that moment. Tried again for a while: just after a
    failed push the engine may refuse to delete the image (it only untags it)."""
    label, value = NONCE.split("=")

    def gone() -> bool:
        ours = client.images.list(all=True, filters={"label": f"{label}={value}"})
        for image in ours:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                client.images.remove(image.id, force=True, noprune=True)
        return not ours

    wait_until(gone, timeout=30, interval=1)


def env_repo(tmp_path: Path, *names: str, nonce: bool = True) -> Path:
    """An environment repo folder with tasks/ holding copies of edit-file named ``names``."""
    repo = tmp_path / "env"
    for name in names:
        shutil.copytree(FIXTURE_TASKS / "edit-file", repo / "tasks" / name)
        if nonce:
            with (repo / "tasks" / name / "environment" / "Dockerfile").open("a") as handle:
                handle.write(f"LABEL {NONCE}\n")
    return repo
