"""A Python harness from PyPI (aider): its wheels on a portable CPython made from Debian's
packages, as :mod:`.portable` makes tmux, so it runs in any Linux image of its architecture
(glibc of any version, musl, or none) with nothing of the image's Python used or changed.

Layout of ``CACHE/<harness>/<platform>/`` (the machine's own platform, as tmux's)::

    bin/python3                  lib/<loader> --library-path lib --argv0 bin/python3
                                 libexec/python3.11 "$@"
    bin/<command>                bin/python3 -I -c <start the harness's entry point> "$@"
    libexec/python3.11           Debian's interpreter
    lib/                         the shared-library closure of it, its extension modules and
                                 the wheels' (as Debian's loader resolves them), the loader
    lib/python3.11/              the standard library, byte-compiled
    lib/python3/dist-packages/   the harness and its dependencies (``pip install --target``,
                                 wheels only, for cp311 on glibc 2.36), byte-compiled

Python finds its standard library and ``dist-packages`` from its own path (``bin/python3`` is
``sys.executable``: a harness that runs ``sys.executable -m ...`` gets this interpreter again), and
``-I`` keeps the image's ``PYTHON*`` variables and working directory out. Nothing is set in the
environment the harness's commands inherit: a task's ``python3`` is the image's own. The ``.pyc``
files are compiled at fill time (``unchecked-hash``): the read-only mount cannot cache them.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .base import HarnessError
from .portable import LOADERS, MANIFEST, PLATFORMS, closure, unpack

PYTHON = "python3.11"
# The interpreter, its standard library and the libraries its extension modules load (Debian
# bookworm's names); libgcc-s1 and libstdc++6 for the wheels' own (manylinux leaves them out).
PYTHON_PACKAGES = (
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "libc6",
    "zlib1g",
    "libexpat1",
    "libssl3",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libsqlite3-0",
    "libncursesw6",
    "libtinfo6",
    "libreadline8",
    "libuuid1",
    "libgdbm6",
    "libdb5.3",
    "libnsl2",
    "libtirpc3",
    "libgssapi-krb5-2",
    "libkrb5-3",
    "libk5crypto3",
    "libkrb5support0",
    "libcom-err2",
    "libkeyutils1",
    "libcrypt1",
    "libgcc-s1",
    "libstdc++6",
)
GLIBC = (2, 36)  # bookworm's, which the folder carries: the newest manylinux tag its wheels take
_PYTHON_LAUNCHER = """#!/bin/sh
# CPython from Debian's {package} {version}, with its libraries and loader (harbor-openenv)
here=$(dirname "$0")/..
exec "$here/lib/{loader}" --library-path "$here/lib" --argv0 "$here/bin/python3" \\
  "$here/libexec/{python}" "$@"
"""
_COMMAND_LAUNCHER = """#!/bin/sh
# {name} {version} from PyPI on the folder's CPython (harbor-openenv)
exec "$(dirname "$0")/python3" -I -c 'import sys; sys.argv[0] = "{command}"; \\
from {module} import {function}; sys.exit({function}())' "$@"
"""


def fill_harness(
    root: Path, name: str, requirement: str, version: str, entry: str
) -> dict[str, int]:
    """Make ``root/name/<platform>`` the harness ``requirement==version`` (its console script
    ``entry``: ``command=module:function``) on a portable CPython, for this machine, and write
    the cache's manifest; replaces what was there. Returns its size in bytes by platform."""
    machine = platform.machine()
    where, loader = PLATFORMS.get(machine), LOADERS.get(machine)
    if where is None or loader is None:
        raise HarnessError(f"no portable {PYTHON} for the architecture {machine!r}")
    command, _, target = entry.partition("=")
    module, _, function = target.partition(":")
    with tempfile.TemporaryDirectory(prefix=f"harbor-openenv-{name}-") as scratch:
        root_fs, versions = unpack(Path(scratch), PYTHON_PACKAGES)
        staged = Path(scratch) / "out"
        lib = staged / "lib"
        for part in ("bin", "libexec"):
            (staged / part).mkdir(parents=True)
        shutil.copy2(root_fs / "usr/bin" / PYTHON, staged / "libexec" / PYTHON)
        shutil.copytree(root_fs / "usr/lib" / PYTHON, lib / PYTHON, symlinks=True)
        shutil.rmtree(lib / PYTHON / "test", ignore_errors=True)
        site = lib / "python3" / "dist-packages"
        _pip_install(f"{requirement}=={version}", site, machine)
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts for the host's Python
        elves = [staged / "libexec" / PYTHON, *sorted(p for p in lib.rglob("*.so*") if p.is_file())]
        for library in closure(root_fs, elves, loader, inside=staged):
            shutil.copy(library, lib / library.name)  # follows the symlinks
        python = staged / "bin" / "python3"
        python.write_text(
            _PYTHON_LAUNCHER.format(
                package=PYTHON_PACKAGES[0], version=versions[0], loader=loader, python=PYTHON
            )
        )
        launcher = staged / "bin" / command
        launcher.write_text(
            _COMMAND_LAUNCHER.format(
                name=name, version=version, command=command, module=module, function=function
            )
        )
        for script in (python, launcher):
            script.chmod(0o755)
        _compile(python, [lib / PYTHON, site])
        packages = dict(zip(PYTHON_PACKAGES, versions, strict=True))
        (staged / MANIFEST).write_text(
            json.dumps({"program": command, "machine": machine, "packages": packages}, indent=1)
            + "\n"
        )
        folder = root / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        shutil.move(staged, folder / where)
    manifest = {
        "name": name,
        "version": version,
        "platform": where,
        "packages": {where: f"{requirement}=={version}"},
    }
    (folder / "harness.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return {where: sum(p.stat().st_size for p in (folder / where).rglob("*") if p.is_file())}


def manylinux_tags(machine: str) -> list[str]:
    """The platform tags of the wheels the folder's glibc (:data:`GLIBC`) loads, newest first."""
    major, minor = GLIBC
    tags = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 16, -1)]
    return [*tags, f"manylinux2014_{machine}"]


def _pip() -> list[str]:
    """A pip to run: this Python's, else one on PATH (the wheels' tags are given, so its own
    Python's version does not matter)."""
    if _has_pip(sys.executable):
        return [sys.executable, "-m", "pip"]
    found = shutil.which("pip3") or shutil.which("pip")
    if found is None:
        raise HarnessError("filling a Python harness needs pip (python -m pip, or pip on PATH)")
    return [found]


def _has_pip(python: str) -> bool:
    done = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False)
    return done.returncode == 0


def _pip_install(requirement: str, target: Path, machine: str) -> None:
    """``requirement`` and its dependencies as wheels for cp311 on this glibc, in ``target``."""
    platforms = [arg for tag in manylinux_tags(machine) for arg in ("--platform", tag)]
    done = subprocess.run(
        [
            *_pip(),
            *("install", "--quiet", "--disable-pip-version-check", "--no-compile"),
            *("--target", str(target), "--only-binary=:all:", "--implementation", "cp"),
            *("--python-version", "3.11", "--abi", "cp311", *platforms),
            *("--platform", "any", requirement),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PIP_REQUIRE_VIRTUALENV": "0"},
    )
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
        problem = (lines or done.stderr.strip().splitlines() or ["no output"])[-1]
        raise HarnessError(f"pip install {requirement} failed: {problem}")


def _compile(python: Path, folders: list[Path]) -> None:
    """Byte-compile ``folders`` with the folder's own interpreter (``unchecked-hash``: the
    files never change under a read-only mount)."""
    done = subprocess.run(
        [
            str(python),
            *("-I", "-m", "compileall", "-q", "-j", "0"),
            *("--invalidation-mode", "unchecked-hash", *map(str, folders)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    # a wheel may ship a file that is not Python 3.11 (a template, a test fixture): compileall
    # reports it and goes on; only an interpreter that cannot start is an error
    if done.returncode != 0 and not (folders[0] / "__pycache__").is_dir():
        problem = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise HarnessError(f"the portable {PYTHON} cannot byte-compile: {problem}")
