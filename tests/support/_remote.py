"""A remote Docker engine for the tests: a ``dockerd`` of its own (tests/support/_engines.py)
serving TCP with TLS on 127.0.0.1 (certificates made in the test), the stand-in base images loaded
into it from the machine's engine, and a server process that cannot reach the machine's engine at
all: it runs in a mount namespace of its own where ``/var/run/docker.sock`` is ``/dev/null``
(:data:`NO_SOCKET`), with only Docker's settings for the remote engine."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import docker
from _engines import Engine
from _server import BASE_IMAGES

from harbor_openenv.client.launch import free_port

DEFAULT_SOCKET = "/var/run/docker.sock"
# The server's command runs after the default socket is hidden from it (and from compose, ssh...).
NO_SOCKET = (
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "sh",
    "-c",
    f'mount --bind /dev/null {DEFAULT_SOCKET} && exec "$@"',
    "sh",
)
# What a server's own environment must not carry into a remote one's.
_CLEARED = ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT")


@contextlib.contextmanager
def remote_engine(source: docker.DockerClient, name: str) -> Iterator[Engine]:
    """A TLS engine with the base images, stopped and removed after."""
    engine = Engine(name, tls_port=free_port())
    try:
        engine.load_images(source, *BASE_IMAGES)
        yield engine
    finally:
        engine.stop()


def remote_env(docker_env: dict[str, str]) -> dict[str, str]:
    """A server's environment variables for an engine named by ``docker_env`` alone (the
    variables this process has for its own engine are blanked)."""
    return {**{name: "" for name in _CLEARED}, **docker_env}
