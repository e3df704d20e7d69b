"""The harness cache: inside harnesses with the runtime each needs, filled on the server's host
from the npm registry (``npm pack`` or ``npm install``, pinned versions) and put read-only into
every task container.

Layout on the host (``HARBOR_OPENENV_HARNESS_CACHE``)::

    CACHE/<harness>/harness.json             name, version, the npm packages filled
    CACHE/<harness>/<platform>/bin/<entry>   one folder per npm platform filled:
                                             linux-x64, linux-x64-musl, linux-arm64, ...

aider, from PyPI, is its wheels on a portable CPython made from Debian's packages
(:mod:`.wheels`), for the filling machine's platform only::

    CACHE/aider/<platform>/bin/aider         lib/<loader> ... libexec/python3.11, -I

A harness that ships self-contained builds (claude-code and opencode: a Bun build per platform,
glibc and musl) needs nothing else. A Node harness (gemini-cli, qwen-code: bundled JavaScript, no
``node_modules``) runs on the cache's ``node``, Node's official build from npm's ``node-linux-*``
packages (glibc only: npm has no musl build), through a launcher its fill writes::

    CACHE/node/<platform>/bin/node
    CACHE/<harness>/<platform>/lib/...       the harness's npm package, as packed
    CACHE/<harness>/<platform>/bin/<command> exec ../../node/<platform>/bin/node lib/<script>

A Node harness whose package needs its dependencies (pi) is installed with them instead, by
``npm install --ignore-scripts --omit=dev`` for the platform, into ``lib/node_modules`` (no
install script runs on the host; the links npm makes, ``node_modules/.bin``, are left out).

The server puts the cache's builds for its engine's architecture into
the helper's volume once (:meth:`HarnessCache.volume_archive`), mounted read-only at
``/.harbor-openenv/harnesses`` in every container: nothing is uploaded per episode, no network is
used at episode time and nothing there can be written by the agent (a read-only volume mount).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from harbor_openenv.helper import MOUNT_DIR

from . import archives
from .base import HarnessError
from .portable import fill_tmux_cache
from .wheels import fill_harness

MOUNTED = f"{MOUNT_DIR}/harnesses"  # in the container: MOUNTED/<harness>/<platform>/...
MANIFEST = "harness.json"
ARCHES = {"x86_64": "x64", "aarch64": "arm64"}  # uname -m -> npm's architecture name
NODE_PLATFORMS = ("linux-x64", "linux-arm64")  # Node's official builds: glibc only
_LAUNCHER = """#!/bin/sh
# {name} {version} on the harness cache's node (harbor-openenv)
here=$(dirname "$0")/..
exec "$here/../../{runtime}/{platform}/{entry}" "$here/{script}" "$@"
"""


@dataclass(frozen=True)
class Build:
    """How one harness is filled from npm: ``package`` (``{platform}`` in it) at ``version``,
    from which ``files`` (member of the npm pack -> path in the platform's folder; a member
    ending in ``/`` keeps that folder) are kept; it ships builds for ``platforms``; it runs
    ``entry`` (a path in the platform's folder). A harness with a ``runtime`` (a build of this
    table: ``node``) is a ``script`` in its folder that runs on it; its ``entry`` is the launcher
    the fill writes, and the runtime's entry is what must load in the image. A ``tree`` build
    is installed with its dependencies (``npm install``) into ``lib/``; ``files`` is unused.
    A ``pypi`` build (aider) is ``package`` from PyPI on a portable CPython (:mod:`.wheels`),
    for the filling machine's platform; ``entry`` is ``bin/<command>`` of its console script
    ``main`` (``module:function``), and it needs nothing of the image (no loader, no runtime)."""

    name: str
    package: str
    version: str
    files: dict[str, str]
    platforms: tuple[str, ...]
    entry: str
    runtime: str | None = None
    script: str | None = None
    tree: bool = False
    main: str | None = None

    @property
    def pypi(self) -> bool:
        return self.main is not None

    def spec(self, platform: str) -> str:
        return f"{self.package.format(platform=platform)}@{self.version}"


BUILDS = {
    build.name: build
    for build in (
        Build(
            name="claude-code",
            package="@anthropic-ai/claude-code-{platform}",
            version="2.1.332",
            files={"package/claude": "bin/claude"},
            platforms=("linux-x64", "linux-x64-musl", "linux-arm64", "linux-arm64-musl"),
            entry="bin/claude",
        ),
        # Node's official builds (glibc): the Node harnesses' runtime. 22 is the major Harbor's
        # agents install (harbor.agents.installed.node_install).
        Build(
            name="node",
            package="node-{platform}",
            version="22.23.5",
            files={"package/bin/node": "bin/node", "package/LICENSE": "LICENSE"},
            platforms=NODE_PLATFORMS,
            entry="bin/node",
        ),
        Build(
            name="gemini-cli",
            package="@google/gemini-cli",
            version="0.61.0",
            files={"package/": "lib/"},
            platforms=NODE_PLATFORMS,
            entry="bin/gemini",
            runtime="node",
            script="lib/bundle/gemini.js",
        ),
        Build(
            name="qwen-code",
            package="@qwen-code/qwen-code",
            version="0.24.4",
            files={"package/": "lib/"},
            platforms=NODE_PLATFORMS,
            entry="bin/qwen",
            runtime="node",
            script="lib/cli-entry.js",
        ),
        Build(
            name="pi",
            package="@earendil-works/pi-coding-agent",
            version="1.6.0",
            files={},
            platforms=NODE_PLATFORMS,
            entry="bin/pi",
            runtime="node",
            script="lib/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js",
            tree=True,
        ),
        Build(
            name="aider",
            package="aider-chat",
            version="0.86.2",
            files={},
            platforms=NODE_PLATFORMS,  # the filling machine's one: x86_64 or aarch64
            entry="bin/aider",
            main="aider.main:main",
        ),
        Build(
            name="opencode",
            package="opencode-{platform}",
            version="1.18.18",
            files={"package/bin/opencode": "bin/opencode"},
            platforms=("linux-x64", "linux-x64-musl", "linux-arm64", "linux-arm64-musl"),
            entry="bin/opencode",
        ),
    )
}


# What else the cache holds, each filled by its own function: terminus-2's tmux (.portable).
RUNTIMES = {"tmux": fill_tmux_cache}


def host_platforms(machine: str) -> tuple[str, ...]:
    """The npm platforms of a machine (``uname -m``): glibc's and musl's."""
    arch = ARCHES.get(machine)
    if arch is None:
        raise HarnessError(f"no harness builds for the architecture {machine!r}")
    return (f"linux-{arch}", f"linux-{arch}-musl")


def platform_of(machine: str, libc: str) -> str:
    """The npm platform for a container's machine and C library (``glibc`` or ``musl``)."""
    glibc, musl = host_platforms(machine)
    return musl if libc == "musl" else glibc


def fill(root: Path, name: str, platforms: tuple[str, ...]) -> dict[str, int]:
    """Fill ``root/name`` with the harness's builds for ``platforms`` (the ones it ships) with
    ``npm pack`` (``npm install``: a tree build); replaces what was there. Returns each
    platform's size in bytes."""
    if name in RUNTIMES:  # a runtime a harness beside the container uses, from Debian's packages
        return RUNTIMES[name](root)
    build = BUILDS.get(name)
    if build is None:
        known = ", ".join(sorted([*BUILDS, *RUNTIMES]))
        raise HarnessError(f"no harness {name!r} to fill (known: {known})")
    if build.pypi:  # from PyPI, for this machine (.wheels)
        return fill_harness(root, name, build.package, build.version, _console(build))
    wanted = [platform for platform in platforms if platform in build.platforms]
    if not wanted:
        raise HarnessError(f"{name} ships no build for {', '.join(platforms)}")
    if shutil.which("npm") is None:
        raise HarnessError("filling the harness cache needs npm (it runs npm pack and npm install)")
    folder = root / name
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="harbor-openenv-fill-") as scratch:
        for platform in wanted:
            target = Path(scratch) / platform
            target.mkdir()
            if build.tree:
                _install(build, platform, target / "lib")
            else:
                packed = _npm("pack", "--pack-destination", scratch, build.spec(platform))
                pack = Path(scratch) / packed.strip().splitlines()[-1]
                _unpack(pack, build.files, target)
                pack.unlink()
            if build.runtime is not None:
                _launcher(build, platform, target)
            sizes[platform] = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for platform in wanted:
            shutil.move(Path(scratch) / platform, folder / platform)
    manifest = {
        "name": name,
        "version": build.version,
        "packages": {platform: build.spec(platform) for platform in wanted},
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if build.runtime is not None and not filled(root, BUILDS[build.runtime]):
        fill(root, build.runtime, platforms)  # the runtime it runs on, once
    return sizes


def _console(build: Build) -> str:
    """``build``'s console script as ``command=module:function``."""
    return f"{build.entry.removeprefix('bin/')}={build.main}"


def filled(root: Path, build: Build) -> bool:
    """Whether ``root`` holds ``build`` at its pinned version."""
    manifest = root / build.name / MANIFEST
    try:
        return bool(json.loads(manifest.read_text()).get("version") == build.version)
    except (OSError, ValueError):
        return False


def _npm(command: str, *arguments: str) -> str:
    """What ``npm command arguments`` printed; raises :class:`HarnessError` with npm's last
    line when it fails."""
    done = subprocess.run(
        ["npm", command, "--silent", *arguments], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        problem = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise HarnessError(f"npm {command} {arguments[-1]} failed: {problem}")
    return done.stdout


def _install(build: Build, platform: str, lib: Path) -> None:
    """``build``'s package and its dependencies for ``platform`` (``linux-<cpu>[-musl]``) in
    ``lib/node_modules``, no install script run, and no link (npm's ``.bin``) kept."""
    _, cpu, *musl = platform.split("-")
    _npm(
        "install",
        *("--prefix", str(lib), "--ignore-scripts", "--omit=dev", "--no-save"),
        *("--no-audit", "--no-fund", "--os=linux", f"--cpu={cpu}"),
        f"--libc={'musl' if musl else 'glibc'}",
        build.spec(platform),
    )
    for path in sorted(lib.rglob("*"), reverse=True):
        if path.is_symlink():
            path.unlink()
    shutil.rmtree(lib / "node_modules" / ".bin", ignore_errors=True)


def _unpack(pack: Path, files: dict[str, str], target: Path) -> None:
    """The members ``files`` names out of the npm pack ``pack``, into ``target``: a file, or
    (a name ending in ``/``) every regular file under a folder (an npm pack holds no links)."""
    with tarfile.open(pack) as tar:
        members = {info.name: info for info in tar.getmembers() if info.isfile()}
        for member, path in files.items():
            if member.endswith("/"):
                kept = {
                    name: path + name.removeprefix(member)
                    for name in members
                    if name.startswith(member) and ".." not in name.split("/")
                }
            else:
                kept = {member: path} if member in members else {}
            if not kept:
                raise HarnessError(f"{pack.name} has no file {member}")
            for name, where in kept.items():
                info = members[name]
                source = tar.extractfile(info)
                if source is None:
                    raise HarnessError(f"{pack.name}: {name} cannot be read")
                destination = target / where
                destination.parent.mkdir(parents=True, exist_ok=True)
                with source, open(destination, "wb") as out:
                    shutil.copyfileobj(source, out)
                destination.chmod(0o755 if info.mode & 0o111 else 0o644)


def _launcher(build: Build, platform: str, target: Path) -> None:
    """The launcher ``build.entry`` in ``target``: its script on its runtime's build."""
    runtime = BUILDS[build.runtime] if build.runtime else None
    if runtime is None or build.script is None or not (target / build.script).is_file():
        raise HarnessError(f"{build.name}: no script {build.script} to run on {build.runtime}")
    launcher = target / build.entry
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text(
        _LAUNCHER.format(
            name=build.name,
            version=build.version,
            runtime=runtime.name,
            platform=platform,
            entry=runtime.entry,
            script=build.script,
        )
    )
    launcher.chmod(0o755)


class HarnessCache:
    """The filled cache at ``root``: what it holds, and its builds for an architecture as one
    tar archive for the helper's volume (made once per content, :mod:`.archives`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._archives: dict[str, Path | None] = {}
        self._lock = threading.Lock()

    def harnesses(self) -> dict[str, dict[str, object]]:
        """Each filled harness's manifest, by name."""
        found = {}
        for manifest in sorted(self.root.glob(f"*/{MANIFEST}")):
            try:
                found[manifest.parent.name] = json.loads(manifest.read_text())
            except ValueError:
                raise HarnessError(f"{manifest}: not JSON (fill the harness again)") from None
        return found

    def volume_archive(self, machine: str) -> Path | None:
        """A tar of ``harnesses/<harness>/<platform>/...`` for ``machine``'s platforms, or None
        when the cache has none."""
        with self._lock:
            if machine not in self._archives:
                self._archives[machine] = self._archive(machine)
            return self._archives[machine]

    def _archive(self, machine: str) -> Path | None:
        platforms = host_platforms(machine)
        folders = [
            folder
            for name in self.harnesses()
            for folder in sorted((self.root / name).iterdir())
            if folder.is_dir() and folder.name in platforms
        ]
        if not folders:
            return None

        def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
            return info

        def write(target: Path) -> None:
            with tarfile.open(target, "w") as tar:
                for folder in folders:
                    name = f"harnesses/{folder.parent.name}/{folder.name}"
                    tar.add(folder, arcname=name, filter=owned)

        key = [machine] + [
            f"{folder.parent.name}/{folder.name}/{entry}"
            for folder in folders
            for entry in archives.files_of(folder)
        ]
        return archives.shared(f"harnesses-{machine}", key, write)
