"""One Docker container per episode: start, exec with timeouts and output caps, files, cleanup.

Containers carry labels naming the runtime and the server process that owns them, so a server can
remove its own at shutdown and, at startup, the ones a dead server left behind.
"""

from __future__ import annotations

import base64
import io
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
from pathlib import Path, PurePosixPath

import docker
import docker.errors

LABEL = "harbor-openenv"
LABEL_OWNER = "harbor-openenv.owner"
LABEL_TASK = "harbor-openenv.task"
_CONTAINER_ID = re.compile(r"/containers/([0-9a-f]{64})/")
_EXEC_MARK = "HARBOR_OPENENV_EXEC"


class SandboxError(Exception):
    """A container operation failed; the message is meant for the agent or operator."""


class PathEscapeError(SandboxError):
    """An agent path points outside the working directory."""


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
    match = _CONTAINER_ID.search(mounts)
    return f"c-{match[1][:12]}" if match else f"h-{socket.gethostname()}"


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


# A function that stops every process but PID 1 and those in $1 (running before the agent acted),
# then reports leftovers. Builtins only inside the loop, so it never kills a child of its own.
# Processes are named "pid:start time", so an agent cannot cycle PIDs until one of its own
# takes a kept process's number. A script appended (see stop_processes) gets the other arguments.
_STOP_PROCESSES = r"""
stop_all() {
  keep=" $1 "; self=$$; pass=0
  while [ $pass -lt 50 ]; do
    found=0
    for d in /proc/[0-9]*; do
      p=${d#/proc/}
      case "$p" in "$self"|1) continue ;; esac
      read -r line < "$d/stat" 2>/dev/null || continue
      rest=${line##*) }; state=${rest%% *}
      [ "$state" = Z ] && continue
      set -- $rest; shift 19
      case "$keep" in *" $p:$1 "*) continue ;; esac
      kill -KILL "$p" 2>/dev/null && found=1
    done
    [ $found = 0 ] && return 0
    pass=$((pass + 1))
  done
  echo "processes still running after $pass passes" >&2; return 1
}
stop_all "$1" || exit 97
shift
"""
_STOP_FAILED = 97

# Prints "pid:start time" of every process but itself (the baseline stop_processes keeps).
_LIST_PROCESSES = r"""
for d in /proc/[0-9]*; do
  p=${d#/proc/}; [ "$p" = $$ ] && continue
  read -r line < "$d/stat" 2>/dev/null || continue
  set -- ${line##*) }; shift 19; printf '%s:%s ' "$p" "$1"
done
"""

# Appended to a bash command: prints files of folder $1 after the command ran, in one round trip.
# Output: a line "$2", then "name base64" per present regular file ("name" whole when at most $3
# bytes, "name:N" its last N bytes), then "$2." -- the end line only when every read worked, so a
# missing base64, an unreadable or too-big file leaves it out and the caller reads an archive.
_EMIT_FILES = r"""
status=$?
set -o pipefail
cd -- "$1" 2>/dev/null && command -v base64 >/dev/null 2>&1 || exit $status
mark=$2; limit=$3; shift 3
printf '\n%s\n' "$mark"
for spec; do
  name=${spec%%:*}
  { [ -L "$name" ] || [ ! -e "$name" ]; } && continue
  [ -f "$name" ] && [ -r "$name" ] || exit $status
  printf '%s ' "$name"
  if [ "$name" = "$spec" ]; then
    [ "$(wc -c < "$name")" -le "$limit" ] || exit $status
    base64 < "$name" | tr -d '\n' || exit $status
  else
    tail -c "${spec#*:}" -- "$name" | base64 | tr -d '\n' || exit $status
  fi
  printf '\n'
done
printf '%s.\n' "$mark"
exit $status
"""

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
# it in base64; a write renames the staged file $5 onto the name (rename never follows a symlink).
# Exit 3: outside the workdir; 4: missing; 5: a directory; 6: not a regular file.
_FILE_ACTION = r"""
root=${1%/}/; rel=${2#"$1"}; op=$3; name=$4
[ "$op" = write ] && trap 'rm -f -- "$5"' EXIT
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
  [ -d "$name" ] && [ ! -L "$name" ] && exit 5
  mv -f -T -- "$5" "$name" ;;
esac
"""


class Sandbox:
    """A running container for one episode."""

    def __init__(self, client: docker.DockerClient, container) -> None:
        self._client = client
        self.container = container
        self.workdir = "/"
        self._real_workdir = "/"  # resolved once at start, before the agent can move things
        self._baseline = ""  # processes that ran before the agent did

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
    ) -> Sandbox:
        """Start a container kept alive by ``sleep infinity``, as Harbor's compose file does.

        ``labels`` join the runtime's; ``task_id`` None leaves out the task's (a warm-pool
        container serves whichever task asks first).
        """
        options = {}
        if cpus:
            options["nano_cpus"] = int(cpus * 1e9)
        if memory_mb:
            options["mem_limit"] = f"{memory_mb}m"
        if network:
            options["network_mode"] = network
        if pids_limit:
            options["pids_limit"] = pids_limit
        try:
            container = client.containers.run(
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
                **options,
            )
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
            setup = sandbox.exec_root(
                "mkdir -p /logs/agent /logs/verifier /logs/artifacts"
                " && chmod 777 /logs/agent /logs/verifier /logs/artifacts"
                " && pwd && readlink -f . && " + _LIST_PROCESSES,
                workdir=workdir or "",  # "" lets the image's WORKDIR apply
            )
            if setup.exit_code != 0:
                raise SandboxError(f"preparing the container failed: {setup.output.strip()}")
            lines = [*setup.output.splitlines(), "", ""]
            sandbox.workdir = posixpath.normpath(workdir or lines[0])
            sandbox._real_workdir = lines[1]
            sandbox._baseline = lines[2]
        except BaseException:
            sandbox.remove()
            raise
        return sandbox

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

    def _run(self, cmd, *, timeout_s, max_output, user, environment, workdir, mark) -> ExecResult:
        api = self._client.api
        try:
            exec_id = api.exec_create(
                self.container.id, cmd, user=user, environment=environment, workdir=workdir
            )["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as exc:
            raise SandboxError(f"exec failed: {exc.explanation or exc}") from None
        raw = getattr(sock, "_sock", sock)
        deadline = time.monotonic() + timeout_s
        chunks, size, truncated, timed_out = [], 0, False, False
        try:
            for data in _frames(raw, deadline, _read_ahead(sock, raw)):
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
        for _ in range(50):
            info = self._client.api.exec_inspect(exec_id)
            if not info.get("Running"):
                return info.get("ExitCode")
            time.sleep(0.01)
        return None

    def stop_processes(self, then: str = "", *args: str) -> ExecResult:
        """Kill every process started since the container came up (agent processes included),
        then run the root sh script ``then`` with ``args`` in the same round trip; its result."""
        result = self.exec_root(_STOP_PROCESSES + then, self._baseline, *args)
        if result.exit_code == _STOP_FAILED or (not then and result.exit_code != 0):
            raise SandboxError(f"could not stop the agent's processes: {result.output.strip()}")
        return result

    def mark_baseline(self) -> None:
        """Count every process running now as the environment's (stop_processes keeps them)."""
        result = self.exec_root(_LIST_PROCESSES)
        if result.exit_code != 0:
            raise SandboxError(f"cannot list processes: {result.output.strip()}")
        self._baseline = result.output.strip()

    # -- files ---------------------------------------------------------------------------------

    def confine(self, path: str) -> str:
        """Resolve an agent path inside the container, symlinks included, refusing escapes."""
        lexical = resolve_within(self.workdir, path)
        result = self.exec_root(_REALPATH, lexical)
        if result.exit_code != 0:
            raise SandboxError(f"cannot resolve {path!r}: {result.output.strip()}")
        real = posixpath.normpath(result.output.strip())
        if not _inside(self._real_workdir, real):
            raise PathEscapeError(f"{path!r} resolves to {real}, outside the working directory")
        return real

    def read_file(self, path: str, *, max_bytes: int) -> tuple[bytes, bool]:
        """The bytes of the regular file at ``path`` (at most ``max_bytes``), and whether cut."""
        limit = max_bytes + 1
        result = self._file_action("read", path, str(limit), max_output=limit * 3 // 2 + 1024)
        if result.truncated:
            raise SandboxError(f"{path}: reading it failed (its encoded copy was cut)")
        data = base64.b64decode(result.output)
        return data[:max_bytes], len(data) > max_bytes

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``path``, creating parent folders inside the working directory."""
        staged = f".harbor-openenv-{uuid.uuid4().hex}"  # in /, where only root can write
        info = tarfile.TarInfo(staged)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.addfile(info, io.BytesIO(data))
        self._put("/", buffer.getvalue())
        self._file_action("write", path, f"/{staged}")

    def list_dir(self, path: str) -> str:
        return self._file_action("list", path).output

    def _file_action(self, op: str, path: str, *args: str, max_output: int = 1 << 20):
        """Run ``_FILE_ACTION`` on a path :meth:`confine` returned; errors name ``path``."""
        root = self._real_workdir
        folder, name = (path, ".") if path == root else posixpath.split(path)
        result = self._run(
            ["sh", "-c", _FILE_ACTION, "sh", root, folder, op, name, *args],
            timeout_s=60,
            max_output=max_output,
            user="root",
            environment=[],
            workdir="/",
            mark=None,
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

    def exec_then_read(
        self,
        command: str,
        folder: str,
        files: dict[str, int | None],
        *,
        timeout_s: float,
        user: str | None = None,
        env: dict[str, str] | None = None,
        limit: int = 1 << 20,
    ) -> tuple[ExecResult, dict[str, bytes]]:
        """Run ``command`` as :meth:`exec` does (in a subshell), then read the regular files
        ``files`` names in ``folder`` (whole, or their last N bytes when N is given) in the same
        round trip.

        When that read cannot be trusted (the command timed out, the image has no base64, a file
        is unreadable or over ``limit`` bytes) the files come from :meth:`get_files` instead.
        """
        mark = uuid.uuid4().hex
        specs = [name if tail is None else f"{name}:{tail}" for name, tail in files.items()]
        room = sum(limit if tail is None else tail for tail in files.values()) * 4 // 3 + 4096
        result = self.exec(
            f"(\n{command}\n)\n{_EMIT_FILES}",
            timeout_s=timeout_s,
            max_output=room,
            user=user,
            env=env,
            args=(folder, mark, str(limit), *specs),
        )
        found = _emitted(result, mark)
        if found is not None:
            return result, found
        read = self.get_files(folder)
        return result, {
            name: read[name] if tail is None else read[name][-tail:]
            for name, tail in files.items()
            if name in read
        }

    def get_files(self, folder: str) -> dict[str, bytes]:
        """The regular files directly inside ``folder`` (empty when it does not exist)."""
        try:
            stream, _ = self.container.get_archive(folder.rstrip("/"))
        except docker.errors.NotFound:
            return {}
        files = {}
        with tarfile.open(fileobj=_StreamReader(stream), mode="r|") as archive:
            for member in archive:
                parts = PurePosixPath(member.name).parts
                if member.isfile() and len(parts) == 2:
                    handle = archive.extractfile(member)
                    files[parts[1]] = handle.read() if handle else b""
        return files

    def export_path(self, path: str) -> bytes | None:
        """A tar archive of ``path`` (file or folder, named by its basename), None if absent."""
        try:
            stream, _ = self.container.get_archive(path)
        except docker.errors.NotFound:
            return None
        return b"".join(stream)

    def import_archive(self, parent: str, archive: bytes) -> None:
        """Unpack a tar archive into the folder ``parent``, creating it."""
        made = self.exec_root('mkdir -p -- "$1"', parent)
        if made.exit_code != 0:
            raise SandboxError(f"cannot create {parent}: {made.output.strip()}")
        self._put(parent, archive)

    def _put(self, destination: str, archive: bytes) -> None:
        try:
            self.container.put_archive(destination, archive)
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"writing to {destination} failed: {exc.explanation or exc}"
            ) from None


def _emitted(result: ExecResult, mark: str) -> dict[str, bytes] | None:
    """The files ``_EMIT_FILES`` printed after ``mark``, or None when its output is incomplete."""
    if result.timed_out or result.truncated:
        return None
    start = result.output.rfind(f"\n{mark}\n")
    if start < 0 or not result.output.endswith(f"\n{mark}.\n"):
        return None
    lines = result.output[start + len(mark) + 2 : -len(mark) - 2].splitlines()
    found = {}
    for line in lines:
        name, _, data = line.partition(" ")
        try:
            found[name] = base64.b64decode(data, validate=True)
        except ValueError:
            return None
    return found


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
