"""OpenAI's Codex CLI as an inside harness: installed into the task container, run there as the
agent, its model reached through the relay.

Codex ships one self-contained binary per platform (static-pie, musl) in the npm package
``@openai/codex``'s per-platform builds, so it installs offline into any Linux image: the runtime
reads it from a cache on the server's side (``HARBOR_OPENENV_CODEX_PACKAGE``, which
``scripts/fetch-codex`` fills with ``npm pack``), puts it into the helper's volume once, mounted
read-only in every container, and uploads it through the engine only where a container has no
such volume. It runs
``codex exec`` (non-interactive, ``--json`` events) with a model provider of its own whose base
URL is the relayed port, ``http://127.0.0.1:PORT/v1`` inside, and whose wire API is the
Responses API (the only one Codex speaks; the capture proxy turns it into chat completions
upstream). Codex's own sandbox is off (the task container is the sandbox), as are its web
search, update check and analytics. Codex holds no key: the relay's target is a
:class:`.keyed_port.KeyedPort`, which adds the session's key to each request on the server's
side, so nothing in the container can read it. The model's turns are capped by the capture
proxy's session, not here; the wall time by the budget.
"""

from __future__ import annotations

import json
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal
from urllib.parse import urlsplit

from harbor_openenv.config import Settings
from harbor_openenv.helper import MOUNT_DIR
from harbor_openenv.sandbox.base import Sandbox
from harbor_openenv.sandbox.errors import SandboxError
from harbor_openenv.sandbox.result import ExecResult

from . import archives
from .base import HarnessError, HarnessResult, HarnessRun
from .keyed_port import KeyedPort, target_of

HOME = "/opt/harbor-openenv/codex"  # where codex is uploaded: bin/codex, path/ (rg)
PORT = 4180  # the relayed port inside the container
LOG_BYTES = 64 << 10  # the tail of codex's output a result keeps
_TRIPLES = {"x86_64": "x86_64-unknown-linux-musl", "aarch64": "aarch64-unknown-linux-musl"}
# Where the helper's volume holds codex when the server put it there (codex_volume_archive):
# mounted read-only into every container, so a rollout uploads nothing.
MOUNTED = f"{MOUNT_DIR}/codex"


# The line ``codex exec`` runs under, as the agent: $1 is codex's binary. One that is not there
# (no helper volume holds codex) prints ABSENT and exits with ABSENT_CODE, so the binary is
# uploaded and the line run again. CODEX_HOME is one per uid in /var/tmp (the image's sticky
# folder; /tmp where there is none: Codex then makes no helper links, as it refuses to under a
# temporary folder); PATH gets the package's own ripgrep.
ABSENT = "harbor-openenv: codex is not in this container"
ABSENT_CODE = 97
LAUNCH = (
    f'[ -x "$1" ] || {{ echo "{ABSENT}"; exit {ABSENT_CODE}; }}; '
    "t=/var/tmp; [ -d $t ] && [ -w $t ] || t=/tmp; "
    'export CODEX_HOME="$t/harbor-openenv-codex-$(id -u)" PATH="${1%/bin/codex}/path:$PATH"'
    ' && mkdir -p "$CODEX_HOME" && exec "$@" </dev/null'
)


class Codex:
    """The Codex CLI inside the task container, from ``package``: a folder holding
    ``<triple>/bin/codex`` somewhere below (an unpacked npm package, or what
    ``scripts/fetch-codex`` leaves), or one npm pack ``.tgz`` of a per-platform build."""

    name = "codex"
    where: Literal["beside", "inside"] = "inside"

    def __init__(self, package: Path, *, port: int = PORT) -> None:
        self.package = package
        self.port = port
        self._archives: dict[str, Path] = {}  # architecture -> the install archive, made once
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> Codex:
        """The harness of the server's ``HARBOR_OPENENV_CODEX_PACKAGE``."""
        if settings.codex_package is None:
            raise HarnessError("HARBOR_OPENENV_CODEX_PACKAGE is not set (see scripts/fetch-codex)")
        return cls(settings.codex_package)

    def run(self, run: HarnessRun) -> HarnessResult:
        """Relay the model's port and run ``codex exec`` until it stops or the budget's time is
        up: from the helper's volume, with no exec of its own before (the launch line checks
        for it), or uploaded first where it is not there."""
        sandbox = run.sandbox
        deadline = time.monotonic() + run.budget.timeout_s
        try:
            with (
                KeyedPort(target_of(run.model.base_url), run.model.api_key) as target,
                sandbox.relay(self.port, target),
            ):
                result = self._exec(run, MOUNTED, deadline)
                if result.exit_code == ABSENT_CODE and result.output.strip() == ABSENT:
                    result = self._exec(run, self.install(sandbox), deadline)
        except (HarnessError, SandboxError) as exc:
            return HarnessResult("crashed", error=str(exc))
        log = result.output[-LOG_BYTES:]
        if result.timed_out:
            return HarnessResult(
                "timeout", error=f"codex ran past its {run.budget.timeout_s:g} s", log=log
            )
        failure = _failure(result.output)
        if result.exit_code == 0 and failure is None:
            return HarnessResult("completed", log=log)
        return HarnessResult(
            "crashed", error=failure or f"codex exited with code {result.exit_code}", log=log
        )

    def _exec(self, run: HarnessRun, codex: str, deadline: float) -> ExecResult:
        """``codex exec`` from the folder ``codex`` until ``deadline`` (monotonic), as the agent
        (through the exec channel where the server has it on: the harness's commands are the
        agent's)."""
        return run.sandbox.exec(
            LAUNCH,
            args=tuple(self.argv(run, codex)),
            user=run.user,
            workdir=run.workdir,
            timeout_s=max(deadline - time.monotonic(), 0.0),
            max_output=16 << 20,
            channel=run.channel,
        )

    def argv(self, run: HarnessRun, codex: str = HOME) -> list[str]:
        """``codex exec`` (from the folder ``codex``) with its model provider on the relayed
        port."""
        path = urlsplit(run.model.base_url).path.rstrip("/")
        provider = {
            "name": "harbor-openenv",
            "base_url": f"http://127.0.0.1:{self.port}{path}",
            "wire_api": "responses",
            "request_max_retries": 1,
            "stream_max_retries": 1,
            "stream_idle_timeout_ms": max(1000, round(run.budget.timeout_s * 1000)),
        }
        config = [
            "model_provider=harbor-openenv",
            *(
                f"model_providers.harbor-openenv.{key}={json.dumps(v)}"
                for key, v in provider.items()
            ),
            'web_search="disabled"',
            "check_for_update_on_startup=false",
            "analytics.enabled=false",
        ]
        return [
            f"{codex}/bin/codex",
            "exec",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
            "--json",
            *("--model", run.model.model),
            *(part for item in config for part in ("-c", item)),
            "--",
            run.instruction,
        ]

    def install(self, sandbox: Sandbox) -> str:
        """Codex uploaded into :data:`HOME` (root's, 0755), the binary for the container's
        architecture (one root exec asks it): for a container whose helper volume does not hold
        it at :data:`MOUNTED`."""
        found = sandbox.exec_root("uname -m")
        machine = found.output.strip()
        if found.exit_code != 0:
            raise HarnessError(f"cannot tell the container's architecture: {machine}")
        with open(self._archive(machine), "rb") as archive:
            sandbox.import_archive(HOME, archive)
        return HOME

    def volume_archive(self, machine: str) -> Path:
        """A tar of ``codex/bin/codex`` (and ``codex/path/rg``) for ``machine``, to go into the
        helper's volume once per server (:data:`MOUNTED` in every container); made once."""
        return self._archive(machine, prefix="codex/")

    def _archive(self, machine: str, prefix: str = "") -> Path:
        """The install archive for ``machine`` (its names under ``prefix``), made once per
        content (:mod:`.archives`)."""
        with self._lock:
            key = prefix + machine
            if key not in self._archives:
                triple = _TRIPLES.get(machine)
                if triple is None:
                    raise HarnessError(f"codex has no build for the container's {machine!r}")
                archive = f"codex-{prefix.strip('/') or 'upload'}-{triple}"

                def write(target: Path) -> None:
                    with tarfile.open(target, "w") as tar:
                        for name, source, size in _sources(self.package, triple):
                            info = tarfile.TarInfo(prefix + name)
                            info.size, info.mode = size, 0o755
                            tar.addfile(info, source)

                package = self.package.resolve()
                listing = archives.files_of(package) if package.is_dir() else []
                found = package.stat()
                content = [str(package), f"{found.st_size} {found.st_mtime_ns}", *listing]
                target = archives.shared(archive, content, write)
                self._archives[key] = target
            return self._archives[key]


def _sources(package: Path, triple: str) -> Iterator[tuple[str, IO[bytes], int]]:
    """Codex for ``triple`` and its ripgrep (if there) out of ``package``: each as its name in
    the install archive, an open file and its size."""
    wanted = (("bin/codex", "bin/codex"), ("path/rg", "codex-path/rg"))
    if package.is_dir():
        found = sorted(package.glob(f"**/{triple}/bin/codex"))
        if not found:
            raise HarnessError(f"{package} holds no codex build for {triple}")
        vendor = found[0].parent.parent
        for name, suffix in wanted:
            if (vendor / suffix).is_file():
                with open(vendor / suffix, "rb") as source:
                    yield name, source, (vendor / suffix).stat().st_size
        return
    if not package.is_file() or not tarfile.is_tarfile(package):
        raise HarnessError(f"the codex package {package} is neither a folder nor an npm pack")
    with tarfile.open(package) as pack:
        members = {member.name: member for member in pack.getmembers() if member.isfile()}
        for name, suffix in wanted:
            member = next(
                (m for n, m in members.items() if n.endswith(f"/{triple}/{suffix}")), None
            )
            if member is None and name == "bin/codex":
                raise HarnessError(f"{package} holds no codex build for {triple}")
            if member is not None:
                extracted = pack.extractfile(member)
                if extracted is not None:
                    yield name, extracted, member.size


def _failure(output: str) -> str | None:
    """The last error Codex reported in its ``--json`` events, if any."""
    found = None
    for line in output.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("type") == "turn.failed":
            found = str((event.get("error") or {}).get("message") or "the turn failed")
        elif event.get("type") == "error":
            found = str(event.get("message") or "an error")
    return found
