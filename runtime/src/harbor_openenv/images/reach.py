"""What a task image's verifier can execute or import, and which files the image shipped: the
tamper report's input (:mod:`harbor_openenv.episode.tamper`), probed once per image.

The probe runs in a throwaway container of the image (never the agent's, which may be changed;
the image is the task's own), as root with no network: it runs every ``python*`` found in the
image's ``PATH`` folders to print its ``sys.path``, prefixes and site folders, then lists every
path of the image's root filesystem (``find / -xdev``). The image's ``Env`` (``PATH``,
``PYTHONPATH``, ``LD_LIBRARY_PATH``, ``LD_PRELOAD``, ``BASH_ENV``, ...) comes from the engine's
image inspect; a task's ``[verifier].env`` joins it (:meth:`Reach.with_env`).
"""

from __future__ import annotations

import array
import bisect
import io
import json
import logging
import posixpath
import re
import tarfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import docker
import docker.errors
import requests

DEFAULT_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
LIB_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
# Variables whose value names files or folders, by the class a change there counts in.
ENV_CLASSES = {
    "PATH": "executables",
    "PYTHONPATH": "libraries",
    "LD_LIBRARY_PATH": "libraries",
    "LD_PRELOAD": "libraries",
    "BASH_ENV": "shell_startup",
    "ENV": "shell_startup",
    "PYTHONSTARTUP": "interpreter_hooks",
}
log = logging.getLogger("harbor_openenv")
_MARK = "@@harbor-openenv-reach"
_PY = (
    "import sys, json; import site\n"
    "g = getattr(site, 'getsitepackages', lambda: [])\n"
    "u = getattr(site, 'getusersitepackages', lambda: '')\n"
    f"print('{_MARK} ' + json.dumps([sys.executable, sys.prefix, sys.base_prefix,"
    " [p for p in sys.path if p], g(), u()]))"
)
_OUT = "/harbor-openenv-reach"
LABEL_PROBE = "harbor-openenv.probe"  # on the probe's container: not an episode's
_PROBE_TIMEOUT_S = 300
# $@: the PATH folders. Interpreters first (one JSON line each), then every path, NUL-separated,
# into _OUT (listed too: it is the probe's, harmless).
_SCRIPT = (
    '{ for d in "$@"; do for f in "$d"/python*; do case "$f" in *-config|*"*") continue;; esac;'
    ' [ -f "$f" ] && [ -x "$f" ] && "$f" -B -c "$PY"; done; done;'
    f" echo {_MARK}-files; find / -xdev -print0; }} > {_OUT} 2>/dev/null"
)


class Shipped:
    """The paths an image shipped, as a sorted array of their hashes (a few MB for 300,000
    paths): a hash collision can only make an added path look shipped, which makes a change
    there more suspect, never less. Also the folders that hold shipped paths."""

    def __init__(self, paths: Iterable[str]) -> None:
        names, folders, code = set(), set(), set()
        for path in paths:
            names.add(hash(path))
            folders.add(hash(posixpath.dirname(path)))
            if path.endswith(".py"):
                code.add(hash(posixpath.dirname(path)))
        self._paths = array.array("q", sorted(names))
        self._folders = array.array("q", sorted(folders))
        self._code = array.array("q", sorted(code))

    def __contains__(self, path: object) -> bool:
        return _has(self._paths, hash(path))

    def holds(self, folder: str) -> bool:
        """Whether the image shipped anything in ``folder``."""
        return _has(self._folders, hash(folder))

    def holds_code(self, folder: str) -> bool:
        """Whether the image shipped a Python module in ``folder``."""
        return _has(self._code, hash(folder))

    def __len__(self) -> int:
        return len(self._paths)


def _has(table: array.array[int], key: int) -> bool:
    at = bisect.bisect_left(table, key)
    return at < len(table) and table[at] == key


@dataclass(frozen=True)
class Interpreter:
    """One Python of the image, as it reports itself."""

    executable: str
    prefixes: tuple[str, ...]
    path: tuple[str, ...]  # sys.path, entries that exist or not
    sites: tuple[str, ...]  # its site folders: where .pth files are read and installs go


@dataclass(frozen=True)
class Reach:
    """Where the verifier executes or imports from; ``shipped`` None: not known (the engine's
    list of changes, which tells added from changed, is asked instead)."""

    path_dirs: tuple[str, ...] = DEFAULT_PATH
    interpreters: tuple[Interpreter, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # the image's and the verifier's variables above
    shipped: Shipped | None = field(default=None, compare=False)

    @property
    def import_roots(self) -> tuple[str, ...]:
        """``sys.path`` of each interpreter, its site folders (a user site is on it once made)
        and ``PYTHONPATH``'s entries."""
        roots = [p for one in self.interpreters for p in (*one.path, *one.sites)]
        roots += [p for name, value in self.env if name == "PYTHONPATH" for p in _split(value)]
        return tuple(dict.fromkeys(posixpath.normpath(p) for p in roots))

    @property
    def site_dirs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s for one in self.interpreters for s in one.sites))

    @property
    def interpreter_dirs(self) -> tuple[str, ...]:
        """The folders an interpreter reads its configuration from (``pyvenv.cfg``, ``._pth``,
        ``pybuilddir.txt``): its own folder and the one above, for each."""
        found = []
        for one in self.interpreters:
            folder = posixpath.dirname(one.executable)
            found += [folder, posixpath.dirname(folder)]
            found += [posixpath.join(p, "lib") for p in one.prefixes]
        return tuple(dict.fromkeys(found))

    def named(self) -> list[tuple[str, str]]:
        """(path, class) for each path a variable other than ``PATH`` names."""
        return [
            (posixpath.normpath(p), ENV_CLASSES[name])
            for name, value in self.env
            if name in ENV_CLASSES and name != "PATH"
            for p in _split(value, spaces=name == "LD_PRELOAD")
        ]

    def with_env(self, env: Mapping[str, str]) -> Reach:
        """This reach with a verifier's (or a task environment's) variables added: a ``PATH`` of
        its own is searched too, ``PYTHONPATH`` entries are imported from, and so on."""
        added = tuple((k, v) for k, v in sorted(env.items()) if k in ENV_CLASSES)
        dirs = [p for k, v in added if k == "PATH" for p in _split(v)]
        return replace(
            self,
            env=self.env + added,
            path_dirs=tuple(dict.fromkeys([*dirs, *self.path_dirs])),
        )


def _split(value: str, spaces: bool = False) -> list[str]:
    """A list variable's entries (``LD_PRELOAD``'s are separated by spaces too)."""
    return [part for part in re.split("[: ]" if spaces else ":", value) if part]


def _guessed() -> Reach:
    """The reach where the image cannot be probed: the default ``PATH`` and the CPython 3
    layouts of Debian and the official images (nothing known shipped)."""
    ones = []
    for minor in range(6, 15):
        version = f"3.{minor}"
        for prefix in ("/usr", "/usr/local"):
            lib = f"{prefix}/lib/python{version}"
            sites = [f"{lib}/site-packages", f"{lib}/dist-packages"]
            sites += ["/usr/lib/python3/dist-packages"] if prefix == "/usr" else []
            ones.append(
                Interpreter(
                    f"{prefix}/bin/python{version}",
                    (prefix,),
                    (f"{prefix}/lib/python3{minor}.zip", lib, f"{lib}/lib-dynload", *sites),
                    tuple(sites),
                )
            )
    return Reach(interpreters=tuple(ones))


GUESSED = _guessed()


def parse(env: Iterable[str], output: bytes) -> Reach:
    """The reach of an image whose ``Env`` is ``env`` (``NAME=value`` entries) from the probe's
    output."""
    variables = dict(entry.partition("=")[::2] for entry in env)
    dirs = _split(variables.get("PATH", "")) or list(DEFAULT_PATH)
    head, _, files = output.partition(f"{_MARK}-files\n".encode())
    interpreters = {}
    for line in head.decode(errors="replace").splitlines():
        if not line.startswith(_MARK + " "):
            continue
        try:
            exe, prefix, base, path, sites, user = json.loads(line[len(_MARK) + 1 :])
        except ValueError:
            continue
        sites = [*sites, *([user] if user else [])]
        interpreters[exe] = Interpreter(
            str(exe),
            tuple(dict.fromkeys([str(prefix), str(base)])),
            tuple(str(p) for p in path if str(p).startswith("/")),
            tuple(str(s) for s in sites),
        )
    shipped = None
    if files:
        shipped = Shipped(p.decode(errors="replace") for p in files.split(b"\0") if p)
    return Reach(
        path_dirs=tuple(dict.fromkeys([*dirs, *DEFAULT_PATH])),
        interpreters=tuple(interpreters.values()),
        env=tuple((k, v) for k, v in sorted(variables.items()) if k in ENV_CLASSES),
        shipped=shipped,
    )


def probe(client: docker.DockerClient, image: str, labels: Mapping[str, str]) -> Reach:
    """The reach of ``image``, from a throwaway container of it (removed after); the default
    reach (no interpreters, nothing known shipped) where the image cannot run the probe."""
    try:
        env = client.images.get(image).attrs.get("Config", {}).get("Env") or []
    except docker.errors.DockerException as exc:
        log.warning("the tamper report's probe of %s failed (%s): its reach is guessed", image, exc)
        return GUESSED
    variables = dict(entry.partition("=")[::2] for entry in env)
    dirs = _split(variables.get("PATH", "")) or list(DEFAULT_PATH)
    try:
        holder = client.containers.create(
            image,
            ["-c", _SCRIPT, "sh", *dict.fromkeys([*dirs, *DEFAULT_PATH])],
            entrypoint=["sh"],
            environment={"PY": _PY},
            user="0",
            network_mode="none",
            labels={**labels, LABEL_PROBE: "1"},
        )
        try:
            holder.start()
            holder.wait(timeout=_PROBE_TIMEOUT_S)
            stream, _ = holder.get_archive(_OUT)  # a file, not its log: that may come cut
            output = _member(b"".join(stream))
        finally:
            holder.remove(force=True)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        log.warning("the tamper report's probe of %s failed (%s): its reach is guessed", image, exc)
        return parse(env, b"")
    return parse(env, output)


def _member(archive: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        member = tar.next()
        stream = tar.extractfile(member) if member is not None else None
        return stream.read() if stream is not None else b""


class Reaches:
    """Each image's reach, probed once (callers for the same image wait for the one probe)."""

    def __init__(self, client: docker.DockerClient, labels: Mapping[str, str]) -> None:
        self._client, self._labels = client, dict(labels)
        self._lock = threading.Lock()
        self._known: dict[str, Reach] = {}
        self._probing: dict[str, threading.Lock] = {}

    def of(self, image: str, *, wait: bool = True) -> Reach:
        """``image``'s reach; ``wait`` False: the probe starts in the background (if not
        already) and the answer is :data:`GUESSED` until it is done."""
        with self._lock:
            if image in self._known:
                return self._known[image]
            if not wait:
                if image not in self._probing:
                    self._probing[image] = threading.Lock()
                    threading.Thread(target=self.of, args=(image,), daemon=True).start()
                return GUESSED
            lock = self._probing.setdefault(image, threading.Lock())
        with lock:
            with self._lock:
                if image in self._known:
                    return self._known[image]
            reach = probe(self._client, image, self._labels)
            with self._lock:
                self._known[image] = reach
                self._probing.pop(image, None)
            return reach
