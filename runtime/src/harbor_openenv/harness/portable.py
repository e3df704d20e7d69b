"""A program from Debian's packages made portable: the program, every shared library it loads and
the dynamic loader in one folder, started through that loader, so it runs in any Linux image of
its architecture (glibc of any version, musl, or none) with no network and nothing installed.

Layout of the folder (``fill_tmux`` makes one for tmux)::

    DEST/bin/<program>      a POSIX sh launcher: lib/<loader> --library-path lib libexec/<program>
    DEST/libexec/<program>  the program as Debian built it
    DEST/lib/               its shared-library closure (as Debian's loader resolves it), the loader

The loader's ``--library-path`` reaches only the program: the processes it starts (tmux's shell
and everything the agent runs in it) load the image's own libraries, as without it. Filled on the
server's host from Debian's archive with ``apt-get download`` (the host needs apt and dpkg-deb:
a Debian or Ubuntu host; the packages are bookworm's when the host is bookworm).
"""

from __future__ import annotations

import json
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from .base import HarnessError

MANIFEST = "portable.json"  # what a portable folder holds: the program, its packages, versions
TMUX_PACKAGES = ("tmux", "libevent-core-2.1-7", "libtinfo6", "libutempter0", "libc6")
PLATFORMS = {"x86_64": "linux-x64", "aarch64": "linux-arm64"}  # uname -m -> the cache's folder
LOADERS = {"x86_64": "ld-linux-x86-64.so.2", "aarch64": "ld-linux-aarch64.so.1"}
_LAUNCHER = """#!/bin/sh
# {program} from Debian's {package} {version}, with its libraries and loader (harbor-openenv)
here=$(dirname "$0")/..
exec "$here/lib/{loader}" --library-path "$here/lib" "$here/libexec/{program}" "$@"
"""


def fill_tmux(dest: Path) -> int:
    """Make ``dest`` a portable tmux (see the module's layout) from Debian's packages; replaces
    what was there. Returns its size in bytes."""
    return fill_program(dest, "tmux", "usr/bin/tmux", TMUX_PACKAGES)


def fill_tmux_cache(root: Path) -> dict[str, int]:
    """The harness cache's ``root/tmux``: a portable tmux for this machine's platform and the
    cache's manifest (``harness.json``), so the server puts it into the helper's volume with the
    harnesses. Returns its size in bytes by platform."""
    machine = platform.machine()
    where = PLATFORMS.get(machine)
    if where is None:
        raise HarnessError(f"no portable tmux for the architecture {machine!r}")
    size = fill_tmux(root / "tmux" / where)
    made = json.loads((root / "tmux" / where / MANIFEST).read_text())
    manifest = {"name": "tmux", "version": made["packages"]["tmux"], "packages": made["packages"]}
    (root / "tmux" / "harness.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return {where: size}


def fill_program(dest: Path, program: str, path: str, packages: tuple[str, ...]) -> int:
    """Make ``dest`` the portable folder of ``path`` (in the first of ``packages``, which with the
    rest hold its library closure and the C library); returns its size in bytes."""
    machine = platform.machine()
    loader = LOADERS.get(machine)
    if loader is None:
        raise HarnessError(f"no portable {program} for the architecture {machine!r}")
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise HarnessError(f"filling a portable {program} needs {tool} (a Debian host)")
    with tempfile.TemporaryDirectory(prefix=f"harbor-openenv-{program}-") as scratch:
        root, versions = unpack(Path(scratch), packages)
        staged = Path(scratch) / "out"
        for part in ("bin", "lib", "libexec"):
            (staged / part).mkdir(parents=True)
        shutil.copy2(root / path, staged / "libexec" / program)
        for library in closure(root, [root / path], loader):
            shutil.copy(library, staged / "lib" / library.name)  # follows the symlinks
        launcher = staged / "bin" / program
        launcher.write_text(
            _LAUNCHER.format(
                program=program, package=packages[0], version=versions[0], loader=loader
            )
        )
        launcher.chmod(0o755)
        (staged / MANIFEST).write_text(
            json.dumps(
                {
                    "program": program,
                    "machine": machine,
                    "packages": dict(zip(packages, versions, strict=True)),
                },
                indent=1,
            )
            + "\n"
        )
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(staged, dest)
    return sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())


def unpack(scratch: Path, packages: tuple[str, ...]) -> tuple[Path, list[str]]:
    """``packages`` downloaded (``apt-get download``) and unpacked into one root; their
    versions."""
    debs = scratch / "debs"
    debs.mkdir()
    fetched = subprocess.run(
        ["apt-get", "download", "-q", *packages],
        cwd=debs,
        capture_output=True,
        text=True,
        check=False,
    )
    if fetched.returncode != 0:
        problem = (fetched.stderr.strip().splitlines() or ["no output"])[-1]
        raise HarnessError(f"apt-get download {' '.join(packages)} failed: {problem}")
    root, versions = scratch / "root", []
    for package in packages:
        (deb,) = sorted(debs.glob(f"{package}_*.deb"))
        versions.append(deb.name.split("_")[1])
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root, versions


def closure(
    root: Path, programs: list[Path], loader: str, *, inside: Path | None = None
) -> list[Path]:
    """The shared libraries ``programs`` load, and the loader, all out of ``root`` (the C
    library's own loader lists them with only ``root``'s folders and each program's own folder
    to search); a library found ``inside`` that folder (a wheel's own, by its RUNPATH) is left
    where it is."""
    dirs = sorted(str(d) for d in root.glob("**/lib/*-linux-gnu") if d.is_dir())
    (ld,) = [Path(d) / loader for d in dirs if (Path(d) / loader).is_file()]
    found: dict[str, Path] = {ld.name: ld}
    for program in programs:
        listed = subprocess.run(
            [str(ld), "--library-path", ":".join([*dirs, str(program.parent)]), "--list"]
            + [str(program)],
            capture_output=True,
            text=True,
            check=False,
        )
        missing = []
        for line in listed.stdout.splitlines():
            name, _, where = line.strip().partition(" => ")
            if where.startswith("not found"):
                missing.append(name)
            elif where and not where.startswith("("):
                library = Path(where.split(" (")[0])
                if root in library.parents:
                    found.setdefault(library.name, library)
                elif (inside is None or inside not in library.parents) and library.name != loader:
                    missing.append(name)
        static = "statically linked" in listed.stdout + listed.stderr
        if (listed.returncode != 0 and not static) or missing:
            detail = ", ".join(missing) or listed.stderr.strip()
            raise HarnessError(
                f"{program.name}'s libraries are not all in {shlex.quote(str(root))}: {detail}"
            )
    return list(found.values())
