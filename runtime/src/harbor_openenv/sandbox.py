"""One Docker container per episode: start, exec with timeouts and output caps, files, cleanup.

Containers carry labels naming the runtime and the server process that owns them, so a server can
remove its own at shutdown and, at startup, the ones a dead server left behind.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import logging
import os
import posixpath
import re
import select
import socket
import struct
import tarfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import docker
import docker.errors

from . import helper

log = logging.getLogger("harbor_openenv")
LABEL = "harbor-openenv"
LABEL_OWNER = "harbor-openenv.owner"
LABEL_TASK = "harbor-openenv.task"
_CONTAINER_ID = re.compile(r"/containers/([0-9a-f]{64})/")
# Where Docker bind-mounts a container's own files from /var/lib/docker/containers/<id>/.
_CONTAINER_FILES = ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf")
_EXEC_MARK = "HARBOR_OPENENV_EXEC"


class SandboxError(Exception):
    """A container operation failed; the message is meant for the agent or operator."""


class PathEscapeError(SandboxError):
    """An agent path points outside the working directory."""


class TooLargeError(SandboxError):
    """A file or folder read from a container is over its limit."""


# Prepare arguments for the helper: the verifier's user, its output folder, the tests folder and
# "stage" (empty it for tests to be uploaded) or "keep" (the image brings them).
VerifierDirs = tuple[str, str, str, str]
TAIL_SCAN_BYTES = 64 << 20  # largest file whose tail a read streams through to keep its end
_HELPER_TRIES = 20
_EXIT_WAIT_S = 30.0  # longest wait for the engine to record an ended exec's exit code
_QUOTA_REFUSED = False  # the engine said --storage-opt size does not work here


def _refuse_quota(reason: str) -> None:
    """Remember, for this process, that the engine cannot cap a writable layer."""
    global _QUOTA_REFUSED
    if not _QUOTA_REFUSED:
        log.info("no per-container disk quota on this engine (%s): the disk guard holds", reason)
    _QUOTA_REFUSED = True


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None
    output: str
    truncated: bool = False
    timed_out: bool = False


def resolve_within(workdir: str, path: str) -> str:
    """``path`` (relative to ``workdir`` or absolute) normalised, if it stays inside ``workdir``.

    Lexical only; :meth:`Sandbox.confine` also resolves symlinks inside the container.
    """
    if not path or "\x00" in path:
        raise PathEscapeError(f"invalid path {path!r}")
    root = posixpath.normpath(workdir)
    joined = posixpath.normpath(posixpath.join(root, path))
    if not _inside(root, joined):
        raise PathEscapeError(f"{path!r} is outside the working directory {root}")
    return joined


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def server_scope() -> str:
    """Where this process's PIDs mean something: ``c-<container id>`` inside a container, else
    ``h-<host name>``. (A container on the host network shares the host's name, not its PIDs.)"""
    try:
        mounts = Path("/proc/self/mountinfo").read_text()
    except OSError:
        mounts = ""
    found = container_id(mounts)
    return f"c-{found[:12]}" if found else f"h-{socket.gethostname()}"


def container_id(mountinfo: str) -> str | None:
    """The container whose files are mounted at this process's /etc/hostname (hosts,
    resolv.conf), or None. Only a mount point counts: on a host running the engine, every running
    container's files are listed too, under their overlay folders, and which one comes first
    changes as containers come and go."""
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] in _CONTAINER_FILES:
            match = _CONTAINER_ID.search(fields[3])
            if match:
                return match[1]
    return None


def server_identity() -> str:
    """``scope:pid:start`` of this process, to tell a live owner from a dead one later."""
    return f"{server_scope()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat.rsplit(")", 1)[1].split()[19]


def owner_alive(client: docker.DockerClient, owner: str) -> bool:
    """Whether the server process named by a container's owner label still runs.

    Certain only where this process sees the owner's PIDs (the same scope); a server in another
    container counts as alive while that container runs (a restarted one sweeps its own); a
    server elsewhere on a host, seen from a container, cannot be checked and is kept.
    """
    scope, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    if scope == server_scope():
        return pid.isdigit() and _start_time(int(pid)) == start
    if not scope.startswith("c-"):
        return True
    try:
        return client.api.inspect_container(scope[2:])["State"]["Running"]
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError:
        return True  # cannot tell: keep its containers


def remove_containers(client: docker.DockerClient, *, owner: str | None = None) -> int:
    """Remove this runtime's containers: ``owner``'s, or (None) those whose owner is dead.

    Networks and volumes carrying the labels (compose projects') go too, after their containers.
    Returns the number of containers removed.
    """
    filters = {"label": [LABEL] + ([f"{LABEL_OWNER}={owner}"] if owner else [])}
    alive: dict[str, bool] = {}

    def dead(labels: dict[str, str]) -> bool:
        label = labels.get(LABEL_OWNER, "")
        if owner is not None:
            return True
        if label not in alive:
            alive[label] = owner_alive(client, label)
        return not alive[label]

    removed = 0
    # The low-level list: the high-level one inspects each container and fails with NotFound
    # when one disappears (an episode ending) while the list is read.
    for info in client.api.containers(all=True, filters=filters):
        if not dead(info.get("Labels") or {}):
            continue
        try:
            client.api.remove_container(info["Id"], force=True, v=True)
            removed += 1
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: its removal is already in progress
                raise
    for collection in (client.networks, client.volumes):
        for item in collection.list(filters=filters):
            if dead(item.attrs.get("Labels") or {}):
                try:
                    item.remove()
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as exc:  # still in use by a live container
                    if exc.status_code != 409:
                        raise
    return removed


# Kills the processes that carry one exec's marker in their environment (a timed-out exec).
_KILL_MARKED = r"""
for d in /proc/[0-9]*; do
  [ "${d#/proc/}" = "$$" ] && continue
  if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "$1"; then
    kill -KILL "${d#/proc/}" 2>/dev/null
  fi
done
exit 0
"""

# Prints the real path of $1, which may not exist yet, following symlinks (dangling ones too)
# inside the container. Components below the deepest existing folder are printed as given.
_REALPATH = r"""
p=$1; rest=; links=0
while :; do
  if [ -e "$p" ]; then real=$(readlink -f -- "$p") || exit 1; break; fi
  if [ -L "$p" ]; then
    links=$((links + 1)); [ $links -gt 40 ] && { echo "too many symlinks" >&2; exit 1; }
    target=$(readlink -- "$p")
    case $target in /*) p=$target ;; *) p=$(dirname -- "$p")/$target ;; esac
    continue
  fi
  rest=/$(basename -- "$p")$rest; p=$(dirname -- "$p")
done
printf '%s%s\n' "${real%/}" "$rest"
"""

# One agent file action (read/write/list of $4 in the real folder $2 below the real workdir $1),
# safe against the agent's processes swapping folders for symlinks meanwhile: the folder is entered
# one component at a time with `cd -P` (created first for a write) and its physical path checked
# after every step; the action then works relative to the shell's working directory, a handle no
# later rename can redirect. A read checks the file it actually opened (/proc/$$/fd/3) and prints
# it in base64; a write copies standard input into the file in place, so an existing file keeps its
# mode, owner and group, and a new one gets the exec's umask (022). It runs as the agent's user.
# Exit 3: outside the workdir; 4: missing; 5: a directory; 6: not a regular file.
_FILE_ACTION = r"""
root=${1%/}/; rel=${2#"$1"}; op=$3; name=$4
inside() { case "${1%/}/" in "$root"*) ;; *) exit 3 ;; esac; }
cd -P -- "$1" 2>/dev/null || exit 4
inside "$PWD"
set -f; IFS=/
for c in $rel; do
  [ -n "$c" ] || continue
  if [ "$op" = write ] && [ ! -e "$c" ] && [ ! -L "$c" ]; then mkdir -- "$c" 2>/dev/null; fi
  cd -P -- "$c" 2>/dev/null || exit 4
  inside "$PWD"
done
set +f; unset IFS
case $op in
list)
  if [ -d "$name" ] && [ ! -L "$name" ]; then
    cd -P -- "$name" || exit 4; inside "$PWD"; exec ls -la
  fi
  exec ls -lad -- "$name" ;;  # anything else: the entry itself, never what it may point to
read)
  [ -e "$name" ] || exit 4
  [ -d "$name" ] && exit 5
  [ -f "$name" ] || exit 6
  exec 3< "$name" || exit 4
  inside "$(readlink /proc/$$/fd/3)"
  [ -f /proc/$$/fd/3 ] || exit 6
  head -c "$5" <&3 | base64 ;;
write)
  [ -L "$name" ] && exit 6
  [ -d "$name" ] && exit 5
  [ ! -e "$name" ] || [ -f "$name" ] || exit 6
  exec cat > "$name" ;;
esac
"""


class Sandbox:
    """A running container for one episode."""

    def __init__(self, client: docker.DockerClient, container) -> None:
        self._client = client
        self.container = container
        self.workdir = "/"
        self._real_workdir = "/"  # resolved once at start, before the agent can move things
        self._baseline = ""  # processes that ran before the agent did (see mark_baseline)
        self.default_user = ""  # the container's own user (its image's USER), "" for root
        self.exceeded: str | None = None  # why the disk guard ended the episode, if it did

    @classmethod
    def start(
        cls,
        client: docker.DockerClient,
        image: str,
        *,
        task_id: str | None,
        owner: str,
        workdir: str | None = None,
        cpus: float | None = None,
        memory_mb: int | None = None,
        network: str | None = None,
        env: dict[str, str] | None = None,
        pids_limit: int | None = None,
        labels: dict[str, str] | None = None,
        helper_volume: str,
        storage_mb: int | None = None,
    ) -> Sandbox:
        """Start a container kept alive by ``sleep infinity``, as Harbor's compose file does, with
        the runtime's helper mounted read-only from ``helper_volume``.

        ``labels`` join the runtime's; ``task_id`` None leaves out the task's (a warm-pool
        container serves whichever task asks first). ``storage_mb`` caps the writable layer
        where the engine's storage driver can (overlay2 on xfs with project quotas).
        """
        options: dict = {"mounts": [helper.mount(helper_volume)]}
        if storage_mb:
            options["storage_opt"] = {"size": f"{storage_mb}M"}
        if cpus:
            options["nano_cpus"] = int(cpus * 1e9)
        if memory_mb:
            options["mem_limit"] = f"{memory_mb}m"
        if network:
            options["network_mode"] = network
        if pids_limit:
            options["pids_limit"] = pids_limit
        if "storage_opt" in options and _QUOTA_REFUSED:
            del options["storage_opt"]
        run = functools.partial(
            client.containers.run,
            image,
            ["sh", "-c", "sleep infinity"],
            detach=True,
            labels={
                LABEL: "1",
                LABEL_OWNER: owner,
                **({LABEL_TASK: task_id[:200]} if task_id is not None else {}),
                **(labels or {}),
            },
            environment=env or {},
            working_dir=workdir or None,
        )
        try:
            try:
                container = run(**options)
            except docker.errors.APIError as exc:
                if "storage_opt" not in options or "storage-opt" not in str(exc.explanation):
                    raise
                _refuse_quota(str(exc.explanation))
                del options["storage_opt"]
                container = run(**options)
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"starting a container from {image} failed: {exc.explanation}"
            ) from None
        return cls.attach(client, container, workdir=workdir)

    @classmethod
    def attach(cls, client: docker.DockerClient, container, *, workdir: str | None = None):
        """Prepare a running container (``/logs``, the workdir, the process baseline)."""
        sandbox = cls(client, container)
        try:
            container.reload()
            if container.status != "running":
                logs = container.logs(tail=20).decode(errors="replace")
                raise SandboxError(
                    f"the container of {container.image.tags or container.image.id} exited at"
                    f" once ({container.status}):\n{logs}"
                )
            sandbox.default_user = container.attrs["Config"].get("User") or ""
            # /logs/verifier is the verifier's alone: the helper hands it over at each run.
            setup = sandbox.exec_root(
                "mkdir -p /logs/agent /logs/verifier /logs/artifacts"
                " && chmod 777 /logs/agent /logs/artifacts && chmod 755 /logs/verifier"
                f" && pwd && readlink -f . && {helper.HELPER} list",
                workdir=workdir or "",  # "" lets the image's WORKDIR apply
            )
            if setup.exit_code != 0:
                raise SandboxError(f"preparing the container failed: {setup.output.strip()}")
            lines = [*setup.output.splitlines(), "", ""]
            sandbox.workdir = posixpath.normpath(workdir or lines[0])
            sandbox._real_workdir = lines[1]
            sandbox._baseline = lines[2].strip()
        except BaseException:
            sandbox.remove()
            raise
        return sandbox

    def disk_usage(self) -> int:
        """Bytes in the container's writable layer (apparent sizes), as the engine counts them."""
        api = self._client.api
        try:
            response = api._get(
                api._url("/containers/{0}/json", self.container.id), params={"size": 1}
            )
            return int(api._result(response, True).get("SizeRw") or 0)
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot measure the container's disk: {exc}") from None

    def remove(self) -> None:
        """Remove the container (idempotent)."""
        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # removal already in progress
                raise

    # -- commands ------------------------------------------------------------------------------

    def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        max_output: int,
        user: str | None = None,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        args: tuple[str, ...] = (),
    ) -> ExecResult:
        """Run ``bash -c command`` (``args`` as its $1...); on timeout every process it started
        is killed."""
        mark = f"{_EXEC_MARK}={uuid.uuid4().hex}"
        environment = [f"{k}={v}" for k, v in (env or {}).items()] + [mark]
        return self._run(
            ["bash", "-c", command, *(("bash", *args) if args else ())],
            timeout_s=timeout_s,
            max_output=max_output,
            user=user or "",
            environment=environment,
            workdir=workdir or self.workdir,
            mark=mark,
        )

    def exec_root(
        self, script: str, *args: str, workdir: str = "/", timeout_s: float = 60
    ) -> ExecResult:
        """Run a POSIX sh script as root for the orchestrator (not the agent)."""
        return self._run(
            ["sh", "-c", script, "sh", *args],
            timeout_s=timeout_s,
            max_output=1 << 20,
            user="root",
            environment=[],
            workdir=workdir,
            mark=None,
        )

    def _run(
        self, cmd, *, timeout_s, max_output, user, environment, workdir, mark, stdin=None
    ) -> ExecResult:
        """Run ``cmd`` through the engine's exec API; ``stdin`` (bytes) is its standard input."""
        api = self._client.api
        try:
            exec_id = api.exec_create(
                self.container.id,
                cmd,
                user=user,
                environment=environment,
                workdir=workdir,
                stdin=stdin is not None,
            )["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as exc:
            raise SandboxError(f"exec failed: {exc.explanation or exc}") from None
        raw = getattr(sock, "_sock", sock)
        deadline = time.monotonic() + timeout_s
        chunks, size, truncated, timed_out = [], 0, False, False
        early = _read_ahead(sock, raw)
        try:
            if stdin is not None:
                raw.sendall(stdin)
                raw.shutdown(socket.SHUT_WR)
            for data in _frames(raw, deadline, early):
                room = max_output - size
                if room > 0:
                    chunks.append(data[:room])
                    size += min(room, len(data))
                truncated = truncated or len(data) > room
        except TimeoutError:
            timed_out = True
        finally:
            sock.close()
        if timed_out and mark:
            self.exec_root(_KILL_MARKED, mark)
        exit_code = None if timed_out else self._exit_code(exec_id)
        output = b"".join(chunks).decode("utf-8", errors="replace")
        return ExecResult(exit_code, output, truncated, timed_out)

    def _exit_code(self, exec_id: str) -> int | None:
        """The exit code of an exec whose output has ended. The engine records it a moment
        later, and under load that moment has passed half a second: wait up to
        :data:`_EXIT_WAIT_S` (None: still not recorded by then)."""
        deadline, pause = time.monotonic() + _EXIT_WAIT_S, 0.005
        while True:
            info = self._client.api.exec_inspect(exec_id)
            if not info.get("Running"):
                return info.get("ExitCode")
            if time.monotonic() >= deadline:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def stop_processes(self, prepare: VerifierDirs | None = None) -> None:
        """Kill every process but the baseline's, whatever its name, user or state, with the
        runtime's static helper (never the container's programs); then, with ``prepare``, empty
        the verifier's output folder for its user alone and the tests folder, in the same exec.

        The helper needs one free process slot: a container held at its pids limit is retried
        briefly, then reported as the agent's resource use.
        """
        command = [helper.HELPER, "stop", self._baseline]
        if prepare is not None:
            command += ["prepare", *prepare]
        for attempt in range(_HELPER_TRIES):
            result = self._run_helper(command)
            if result.exit_code == 0:
                return
            if not _no_process_slot(result):
                break
            time.sleep(0.05 * (attempt + 1))
        else:
            raise SandboxError(
                "could not stop the agent's processes: the container stayed at its process limit"
                " (pids_limit), so no process could start in it; the agent's processes used"
                " every slot"
            )
        problem = {97: "could not stop the agent's processes", 98: "cannot prepare the verifier"}
        if result.exit_code is None:
            why = "timed out" if result.timed_out else "the engine recorded no exit code"
            raise SandboxError(f"the runtime helper did not finish ({why})")
        raise SandboxError(
            f"{problem.get(result.exit_code, 'the runtime helper failed')}"
            f" (exit code {result.exit_code}): {result.output.strip()[-1000:]}"
        )

    def mark_baseline(self) -> None:
        """Count every process running now as the environment's: :meth:`stop_processes` keeps
        them. Called once an episode's environment is ready, before the agent's first action."""
        result = self._run_helper([helper.HELPER, "list"])
        if result.exit_code != 0:
            raise SandboxError(f"cannot list processes: {result.output.strip()}")
        self._baseline = result.output.strip()

    def _run_helper(self, command: list[str]) -> ExecResult:
        """Run the runtime's helper as root, directly (no shell of the container's)."""
        return self._run(
            command,
            timeout_s=60,
            max_output=1 << 20,
            user="root",
            environment=[],
            workdir="/",
            mark=None,
        )

    # -- files ---------------------------------------------------------------------------------

    def confine(self, path: str, *, user: str | None = None) -> str:
        """Resolve an agent path inside the container as ``user`` (None: the container's own),
        symlinks included, refusing escapes."""
        lexical = resolve_within(self.workdir, path)
        result = self._run(
            ["sh", "-c", _REALPATH, "sh", lexical],
            timeout_s=60,
            max_output=1 << 16,
            user=user or "",
            environment=[],
            workdir="/",
            mark=None,
        )
        if result.exit_code != 0:
            raise SandboxError(f"cannot resolve {path!r}: {result.output.strip()}")
        real = posixpath.normpath(result.output.strip())
        if not _inside(self._real_workdir, real):
            raise PathEscapeError(f"{path!r} resolves to {real}, outside the working directory")
        return real

    def read_file(
        self, path: str, *, max_bytes: int, user: str | None = None
    ) -> tuple[bytes, bool]:
        """The bytes of the regular file at ``path`` (at most ``max_bytes``), and whether cut."""
        limit = max_bytes + 1
        result = self._file_action(
            "read", path, str(limit), user=user, max_output=limit * 3 // 2 + 1024
        )
        if result.truncated:
            raise SandboxError(f"{path}: reading it failed (its encoded copy was cut)")
        data = base64.b64decode(result.output)
        return data[:max_bytes], len(data) > max_bytes

    def write_file(self, path: str, data: bytes, *, user: str | None = None) -> None:
        """Write ``data`` to ``path`` as ``user``, creating parent folders inside the working
        directory; an existing file keeps its mode, owner and group."""
        self._file_action("write", path, user=user, stdin=data)

    def list_dir(self, path: str, *, user: str | None = None) -> str:
        return self._file_action("list", path, user=user).output

    def _file_action(
        self,
        op: str,
        path: str,
        *args: str,
        user: str | None,
        max_output: int = 1 << 20,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run ``_FILE_ACTION`` as ``user`` on a path :meth:`confine` returned; errors name
        ``path``."""
        root = self._real_workdir
        folder, name = (path, ".") if path == root else posixpath.split(path)
        result = self._run(
            ["sh", "-c", _FILE_ACTION, "sh", root, folder, op, name, *args],
            timeout_s=60,
            max_output=max_output,
            user=user or "",
            environment=[],
            workdir="/",
            mark=None,
            stdin=stdin,
        )
        if result.exit_code == 0:
            return result
        if result.exit_code == 3:
            raise PathEscapeError(f"{path} was moved outside the working directory {root}")
        problem = {
            None: f"{op} timed out",
            4: "no such file or folder" if op != "write" else "cannot create its folder",
            5: "is a directory",
            6: "not a regular file",
        }.get(result.exit_code)
        raise SandboxError(f"{path}: {problem or result.output.strip() or op + ' failed'}")

    def put_dir(
        self,
        source: Path,
        destination: str,
        *,
        replace: bool = True,
        prepared: bool = False,
        executable: str | None = None,
    ) -> None:
        """Copy the host folder ``source`` into ``destination`` (emptied first when ``replace``),
        owned by root. ``prepared``: the caller made ``destination`` already (one round trip
        fewer). ``executable``: a file at the folder's top that gets its execute bits."""
        if not prepared:
            script = 'rm -rf -- "$1" && mkdir -p -- "$1"' if replace else 'mkdir -p -- "$1"'
            cleared = self.exec_root(script, destination)
            if cleared.exit_code != 0:
                raise SandboxError(f"cannot prepare {destination}: {cleared.output.strip()}")

        def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
            if executable is not None and info.name == f"./{executable}" and info.isfile():
                info.mode |= 0o111
            return _root_owned(info)

        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(source, arcname=".", filter=owned)
        self._put(destination, buffer.getvalue())

    # -- reads through the engine (never through the container's programs) ---------------------

    def read_engine_file(self, path: str, *, limit: int, tail: bool = False) -> bytes | None:
        """The regular file at ``path`` as the engine's archive API reads it, None when absent.

        Its size (the apparent one: a sparse file counts whole) is checked before a byte is read:
        over ``limit`` raises :class:`TooLargeError`, or with ``tail`` gives its last ``limit``
        bytes when it is at most :data:`TAIL_SCAN_BYTES`, else raises too.
        """
        api = self._client.api
        url = api._url("/containers/{0}/archive", self.container.id)
        response = api._get(url, params={"path": path}, stream=True)
        try:
            if response.status_code == 404:
                return None
            api._raise_for_status(response)
            size = _archive_stat(response).get("size", 0)
            if size > (TAIL_SCAN_BYTES if tail else limit):
                raise TooLargeError(f"{path} is {size} bytes, over the limit of {limit}")
            chunks = response.iter_content(1 << 16, decode_unicode=False)
            with tarfile.open(fileobj=_StreamReader(chunks), mode="r|") as archive:
                member = archive.next()
                if member is None or not member.isfile():
                    raise SandboxError(f"{path} is not a regular file")
                handle = archive.extractfile(member)
                assert handle is not None
                kept = b""
                while block := handle.read(1 << 16):
                    kept = (kept + block)[-limit:]
                return kept
        except docker.errors.APIError as exc:
            raise SandboxError(f"reading {path} failed: {exc.explanation or exc}") from None
        finally:
            response.close()

    def export_path(self, path: str, target: IO[bytes], *, budget: int) -> bool:
        """Stream a tar of ``path`` (file or folder, named by its basename) into ``target``,
        regular files and folders only, owned by root; False when ``path`` is absent. Raises
        :class:`TooLargeError` once its files' apparent sizes pass ``budget`` bytes."""
        try:
            stream, _ = self.container.get_archive(path)
        except docker.errors.NotFound:
            return False
        with (
            tarfile.open(fileobj=_StreamReader(stream), mode="r|") as source,
            tarfile.open(fileobj=target, mode="w|") as copy,
        ):
            for member in source:
                if not (member.isfile() or member.isdir()):
                    continue
                budget -= member.size
                if budget < 0:
                    raise TooLargeError(f"{path} holds more than the limit's bytes")
                _root_owned(member)
                member.mode &= 0o777
                copy.addfile(member, source.extractfile(member) if member.isfile() else None)
        return True

    def import_archive(self, parent: str, archive: IO[bytes]) -> None:
        """Unpack a tar archive (a file object, streamed) into the folder ``parent``, creating
        it."""
        made = self.exec_root('mkdir -p -- "$1"', parent)
        if made.exit_code != 0:
            raise SandboxError(f"cannot create {parent}: {made.output.strip()}")
        self._put(parent, archive)

    def _put(self, destination: str, archive: bytes | IO[bytes]) -> None:
        try:
            self.container.put_archive(destination, archive)
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"writing to {destination} failed: {exc.explanation or exc}"
            ) from None


def _archive_stat(response) -> dict:
    """The ``X-Docker-Container-Path-Stat`` header of an archive response (size, mode, name)."""
    header = response.headers.get("X-Docker-Container-Path-Stat")
    if not header:
        return {}
    try:
        return json.loads(base64.b64decode(header))
    except ValueError:
        return {}


def _no_process_slot(result: ExecResult) -> bool:
    """Whether an exec failed to start because the container has no free process slot."""
    return result.exit_code in (126, 127, None) and (
        "resource temporarily unavailable" in result.output.lower()
        or "cannot allocate memory" in result.output.lower()
    )


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _read_ahead(sock, raw: socket.socket) -> bytes:
    """The stream bytes the HTTP client read along with the response headers.

    docker-py hands out the socket below the response's buffered reader, so output that arrived
    in the same read as the headers sits in that buffer and is lost to a reader of the socket
    (docker-py issue 3332: empty output under load). A non-blocking read1 returns what the buffer
    holds, or what the socket has, without waiting.
    """
    reader = getattr(getattr(getattr(sock, "_response", None), "raw", None), "_fp", None)
    reader = getattr(reader, "fp", None)
    if reader is None:
        return b""
    timeout = raw.gettimeout()
    raw.settimeout(0.0)
    try:
        return reader.read1(1 << 16) or b""
    except BlockingIOError:
        return b""
    finally:
        raw.settimeout(timeout)


def _frames(sock: socket.socket, deadline: float, buffer: bytes = b""):
    """Payloads of Docker's multiplexed exec stream (``buffer``: bytes already read from it),
    raising TimeoutError past ``deadline``."""
    while True:
        while len(buffer) >= 8:
            size = struct.unpack(">I", buffer[4:8])[0]
            if len(buffer) < 8 + size:
                break
            yield buffer[8 : 8 + size]
            buffer = buffer[8 + size :]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        ready, _, _ = select.select([sock], [], [], remaining)
        if not ready:
            raise TimeoutError
        data = sock.recv(1 << 16)
        if not data:
            return
        buffer += data


class _StreamReader(io.RawIOBase):
    """A file object over docker-py's chunk iterator, for streaming tar reads."""

    def __init__(self, chunks) -> None:
        self._chunks = iter(chunks)
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        count = min(len(target), len(self._buffer))
        target[:count] = self._buffer[:count]
        self._buffer = self._buffer[count:]
        return count
