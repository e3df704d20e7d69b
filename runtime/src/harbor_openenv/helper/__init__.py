"""The runtime's static helper, mounted read-only into every task container.

The helper (the C files of this folder, one per subcommand, built static for each architecture
by the package's build hook; ``main.c`` tells which does what) stops the agent's processes and
prepares the verifier's folders: the work whose honesty decides a reward, so it must not run
on anything an agent with root could have changed (a replaced ``sh`` or ``kill``, an
``/etc/ld.so.preload`` hook). A static binary reads no preload file and no shared library, and a
read-only volume mount cannot be written, remounted or unmounted without ``CAP_SYS_ADMIN``, which
Docker does not grant. Each server keeps its own volume, labelled with its owner, so shutdown and
the sweep of dead servers' leftovers remove it like their containers.

What the helper and this package must agree on (exit codes, limits, flags, request words, where
it is mounted) is ``contract.h``, which :mod:`.contract` reads.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import uuid
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # docker-py only where a volume is made: the interface needs the paths alone
    import docker
    from docker.types import Mount

from . import contract

MOUNT_DIR = contract.MOUNT_DIR
HELPER = f"{MOUNT_DIR}/{contract.HELPER_NAME}"
_ARCHITECTURES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


class HelperError(Exception):
    """The helper is missing for the engine's architecture, or its volume cannot be made."""


def binary(architecture: str) -> bytes:
    """The helper built for an engine architecture as ``docker info`` names it."""
    arch = _ARCHITECTURES.get(architecture)
    if arch is None:
        raise HelperError(f"no helper is built for the engine's architecture {architecture!r}")
    path = resources.files(__package__) / f"harbor-openenv-helper-{arch}"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise HelperError(
            f"the runtime's helper for {arch} is missing ({path}): install harbor-openenv from a"
            " wheel, or reinstall it from source so its build hook compiles the helper"
        ) from None


def mount(volume: str) -> Mount:
    """The read-only mount of a helper volume at :data:`MOUNT_DIR`."""
    from docker.types import Mount

    return Mount(MOUNT_DIR, volume, type="volume", read_only=True)


class HelperVolume:
    """A Docker volume holding the helper, made once per server on first use. ``extras`` gives,
    for the engine's architecture, tar archives of more read-only files to put beside it (the
    codex harness's binary, the harness cache's builds)."""

    def __init__(
        self, labels: dict[str, str], extras: Callable[[str], list[Path]] | None = None
    ) -> None:
        self._labels = labels
        self._extras = extras
        self._lock = threading.Lock()
        self._name: str | None = None

    def ensure(self, client: docker.DockerClient, image: str) -> str:
        """The volume's name, creating and filling it on first use (through a container of
        ``image`` that is created, never started)."""
        with self._lock:
            if self._name is None:
                self._name = self._create(client, image)
            return self._name

    def _create(self, client: docker.DockerClient, image: str) -> str:
        import docker.errors
        from docker.types import Mount

        architecture = client.info().get("Architecture", "")
        data = binary(architecture)
        extras = self._extras(_ARCHITECTURES[architecture]) if self._extras else []
        digest = hashlib.sha256(data).hexdigest()[:12]
        name = f"harbor-openenv-helper-{digest}-{uuid.uuid4().hex[:8]}"
        info = tarfile.TarInfo(contract.HELPER_NAME)
        info.size, info.mode = len(data), 0o555
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.addfile(info, io.BytesIO(data))
        try:
            client.volumes.create(name, labels=self._labels)
            holder = client.containers.create(
                image,
                ["true"],
                entrypoint=[],
                network_mode="none",
                labels=self._labels,
                mounts=[Mount("/helper", name, type="volume")],
            )
            try:
                holder.put_archive("/helper", archive.getvalue())
                for extra in extras:
                    with open(extra, "rb") as stream:  # streamed: it may be large
                        holder.put_archive("/helper", stream)
            finally:
                holder.remove(force=True)
        except docker.errors.APIError as exc:
            problem = exc.explanation or exc
            raise HelperError(f"cannot make the helper's volume: {problem}") from None
        return name
