"""Harbor's environment backends as a :class:`.spec.Starter` (``HARBOR_OPENENV_BACKEND=harbor:X``).

Each episode runs in the environment Harbor's own factory makes for the task (its docker backend,
or any cloud sandbox Harbor supports), driven through Harbor's async interface (start, exec,
upload, download, stop) on one event loop thread. Needs the ``harbor`` extra (Python >= 3.12);
nothing else imports this module.

What such a backend cannot give is refused or weaker, never silently dropped
(docs/design/security.md has the table): a pids or disk limit is refused at reset; the keeper is
not PID 1 (the stop before grading is ``scripts/harbor-keeper.sh``, run as root through Harbor's
exec); reads go through Harbor's download after a size check in the environment; there is no
list of changes, no fork and no exec channel; command output is text.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import shlex
import shutil
import stat
import tarfile
import tempfile
import threading
import uuid
from collections.abc import Coroutine, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

from harbor.environments.base import BaseEnvironment
from harbor.environments.factory import EnvironmentFactory
from harbor.models.environment_type import EnvironmentType
from harbor.models.task.config import NetworkMode, NetworkPolicy, TaskConfig
from harbor.models.trial.config import ResourceMode
from harbor.models.trial.paths import TrialPaths

from harbor_openenv import helper
from harbor_openenv.helper import contract
from harbor_openenv.tasks.dataset import Dataset

from .base import ROOT_PATH, ROOT_SHELL, Sandbox
from .command import Command
from .engine_files import TAIL_SCAN_BYTES, Archive
from .errors import SandboxError
from .files import load_script
from .result import ExecResult
from .spec import ComposeSpec, ContainerSpec

T = TypeVar("T")
_STDIN_DIR = f"{helper.MOUNT_DIR}/stdin"  # a command's standard input, uploaded before it runs
_GRACE_S = 5  # Harbor's own exec timeout, past ours: a backstop
_START_S = 1800.0  # Harbor's start: its image build (the task's build_timeout_sec) and more
_CALL_S = 600.0  # any other call of Harbor's (an upload, a download, a stop)


class _Loop:
    """One asyncio event loop on a daemon thread, where every Harbor call of a backend runs."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        threading.Thread(
            target=self._loop.run_forever, name="harbor-openenv-harbor", daemon=True
        ).start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()


class HarborStarter:
    """Starts each episode in Harbor's environment ``kind`` (an ``EnvironmentType`` value such as
    ``docker``) for its task, with ``kwargs`` passed to the environment's constructor."""

    def __init__(self, tasks_root: Path, kind: str, *, kwargs: Mapping[str, Any]) -> None:
        try:
            self.kind = EnvironmentType(kind)
        except ValueError:
            known = ", ".join(sorted(t.value for t in EnvironmentType))
            raise ValueError(f"Harbor has no environment type {kind!r} (it has {known})") from None
        self._dataset = Dataset(tasks_root)
        self._kwargs = dict(kwargs)
        self._loop = _Loop()

    def start(
        self,
        spec: ContainerSpec,
        *,
        task_id: str | None,
        labels: Mapping[str, str] | None = None,
        compose: ComposeSpec | None = None,
    ) -> Sandbox:
        """Harbor's environment for task ``task_id`` (its compose file, if any, is Harbor's to
        read): ``spec``'s image is not used, Harbor builds or pulls the task's own."""
        assert task_id is not None, "Harbor's backends have no warm pool"
        where = f"Harbor's {self.kind.value} environment"
        if spec.pids_limit:
            raise SandboxError(
                f"{where} cannot limit processes: set HARBOR_OPENENV_PIDS_LIMIT=0 to run without"
                f" the limit of {spec.pids_limit}"
            )
        if spec.storage_mb:
            raise SandboxError(
                f"{where} cannot enforce the disk limit of {spec.storage_mb} MB: set"
                " HARBOR_OPENENV_DISK_MB=0 (a task's own storage_mb is refused)"
            )
        task = self._dataset[task_id]
        config = TaskConfig.model_validate_toml((task.path / "task.toml").read_text())
        work = Path(tempfile.mkdtemp(prefix="harbor-openenv-harbor-"))
        paths = TrialPaths(work)
        paths.mkdir()
        network = NetworkMode.NO_NETWORK if spec.network == "none" else NetworkMode.PUBLIC
        try:
            environment = EnvironmentFactory.create_environment(
                self.kind,
                task.environment_dir,
                task_id.replace("/", "-"),
                f"harbor-openenv-{uuid.uuid4().hex[:12]}",
                paths,
                config.environment,
                override_cpus=spec.cpus,
                override_memory_mb=spec.memory_mb,
                cpu_enforcement_policy=ResourceMode.LIMIT,
                memory_enforcement_policy=ResourceMode.LIMIT,
                persistent_env=dict(spec.env),
                network_policy=NetworkPolicy(network_mode=network),
                **self._kwargs,
            )
        except Exception as exc:
            shutil.rmtree(work, ignore_errors=True)
            raise SandboxError(f"{where} refused task {task_id}: {_one_line(exc)}") from None
        sandbox = HarborSandbox(environment, self._loop, work)
        try:
            sandbox.boot(spec.workdir)
        except BaseException:
            sandbox.remove()
            raise
        return sandbox


class HarborSandbox(Sandbox):
    """One episode in a Harbor environment; every primitive is one or two of its calls."""

    def __init__(self, environment: BaseEnvironment, loop: _Loop, work: Path) -> None:
        super().__init__()
        self._env = environment
        self._loop = loop
        self._work = work  # Harbor's trial folder and the transfers' scratch
        self._marks = ""  # the last baseline, comma-separated PID:START
        self._removed = False

    def _call(self, what: str, coro: Coroutine[Any, Any, T], timeout_s: float = _CALL_S) -> T:
        try:
            return self._loop.run(asyncio.wait_for(coro, timeout_s))
        except TimeoutError:
            raise SandboxError(f"{what} took over {timeout_s:g} s on {self.name}") from None
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"{what} failed on {self.name}: {_one_line(exc)}") from None

    def boot(self, workdir: str | None) -> None:
        """Start the environment, put the helper in, learn its user and prepare it."""
        self._call("starting Harbor's environment", self._env.start(force_build=False), _START_S)
        arch = self.exec_root("uname -m").output.strip()
        made = self.exec_root(
            'mkdir -p -m 0755 -- "$1" && mkdir -p -m 0711 -- "$2"', helper.MOUNT_DIR, _STDIN_DIR
        )
        if made.exit_code != 0:
            raise SandboxError(f"cannot make {helper.MOUNT_DIR}: {made.output.strip()}")
        try:
            binary = helper.binary(arch)
        except helper.HelperError as exc:
            raise SandboxError(str(exc)) from None
        self._put_file(helper.HELPER, binary, 0o755)
        user = self.run(Command(["id", "-un"], timeout_s=60, max_output=4096)).output.strip()
        self.default_user = "" if user in ("root", "") else user
        self.prepare(workdir)

    @property
    def name(self) -> str:
        return str(self._env.session_id).removeprefix("harbor-openenv-")

    def run(self, command: Command) -> ExecResult:
        stdin = command.stdin() if callable(command.stdin) else command.stdin
        script = f"exec {shlex.join(command.argv)}"
        staged = None
        if stdin is not None:
            staged = f"{_STDIN_DIR}/{uuid.uuid4().hex}"
            self._put_file(staged, stdin, 0o444)
            script += f" <{staged}"
        else:
            script += " </dev/null"
        try:
            result = self._loop.run(self._exec(script, command))
        except Exception as exc:
            raise SandboxError(f"exec failed on {self.name}: {_one_line(exc)}") from None
        finally:
            if staged is not None:
                with contextlib.suppress(Exception):
                    self._loop.run(self._env.exec(f"rm -f {staged}", user="root"))
        return result

    async def _exec(self, script: str, command: Command) -> ExecResult:
        try:
            done = await asyncio.wait_for(
                self._env.exec(
                    script,
                    cwd=command.workdir or None,
                    env=dict(command.env) or None,
                    timeout_sec=math.ceil(command.timeout_s) + _GRACE_S,
                    user=command.user or None,
                ),
                command.timeout_s,
            )
        except TimeoutError:
            return ExecResult(None, "", timed_out=True)
        data = ((done.stdout or "") + (done.stderr or "")).encode()
        kept = data[: command.max_output]
        return ExecResult(
            done.return_code,
            kept.decode(errors="replace"),
            truncated=len(data) > len(kept),
            raw=kept,
        )

    def upload(self, destination: str, archive: bytes | IO[bytes]) -> None:
        stream = io.BytesIO(archive) if isinstance(archive, bytes) else archive
        with tempfile.TemporaryDirectory(dir=self._work) as folder:
            with tarfile.open(fileobj=stream, mode="r|") as members:
                members.extractall(folder, filter="tar")
            self._call(f"uploading to {destination}", self._env.upload_dir(folder, destination))

    @contextlib.contextmanager
    def download(self, path: str) -> Iterator[Archive | None]:
        """``path`` through Harbor's download; a file over :data:`TAIL_SCAN_BYTES` (its size as
        ``stat`` in the environment says) is not copied, its archive is empty."""
        probe = self.exec_root(
            'if [ -d "$1" ] && [ ! -L "$1" ]; then echo d; elif [ -e "$1" ] || [ -L "$1" ];'
            ' then echo f; stat -c %s -- "$1"; fi',
            path,
        )
        kind, _, size = probe.output.strip().partition("\n")
        if not kind:
            yield None
            return
        with tempfile.TemporaryDirectory(dir=self._work) as folder:
            local = Path(folder) / (Path(path).name or "root")
            if kind == "d":
                self._call(f"downloading {path}", self._env.download_dir(path, local))
            elif int(size or 0) <= TAIL_SCAN_BYTES:
                self._call(f"downloading {path}", self._env.download_file(path, local))
            with tempfile.SpooledTemporaryFile(1 << 20, dir=str(self._work)) as buffer:
                if local.exists() or local.is_symlink():
                    with tarfile.open(fileobj=buffer, mode="w") as tar:
                        tar.add(local, arcname=local.name)
                buffer.seek(0)
                yield Archive(int(size) if kind == "f" and size else 0, buffer)

    def is_running(self) -> bool:
        if self._removed:
            return False
        try:
            done = self._loop.run(self._env.exec("true", user="root", timeout_sec=60))
        except Exception:
            return False
        return bool(done.return_code == 0)

    def remove(self) -> None:
        if self._removed:
            return
        self._removed = True
        try:
            self._call("stopping Harbor's environment", self._env.stop(delete=True))
        finally:
            shutil.rmtree(self._work, ignore_errors=True)

    def disk_usage(self) -> int:
        raise SandboxError("Harbor's backends measure no disk usage (disk limits are refused)")

    def ask_keeper(self, request: str, *, timeout_s: float) -> str:
        """The keeper's requests, answered by ``scripts/harbor-keeper.sh`` as root: a stop kills
        every process outside the last baseline (whichever users ran code)."""
        ident, word, *fields = request.split("\t")
        if word == contract.REQUEST_PARK:  # the script's stop kills by baseline, not by uid
            return f"{ident} {contract.ANSWER_OK}"
        if word == contract.REQUEST_STOP:
            fields = [self._marks, *fields[1:]]
        answer = self.run(
            Command(
                [ROOT_SHELL, "-c", load_script("harbor-keeper"), "sh", word, *fields],
                timeout_s=timeout_s,
                max_output=1 << 20,
                user="root",
                env={"PATH": ROOT_PATH},
                workdir="/",
            )
        )
        line = answer.output.strip()
        if answer.exit_code != 0 or not line:
            raise SandboxError(f"the keeper's {word} failed on {self.name}: {line[-500:]!r}")
        if word == contract.REQUEST_MARK and line.startswith(contract.ANSWER_OK):
            self._marks = ",".join(line.split()[1:])
        return f"{ident} {line}"

    def _put_file(self, path: str, data: bytes, mode: int) -> None:
        """Upload ``data`` as the file ``path`` (root's, ``mode``) through Harbor's upload."""
        with tempfile.TemporaryDirectory(dir=self._work) as folder:
            local = Path(folder) / "file"
            local.write_bytes(data)
            local.chmod(mode | stat.S_IRUSR)
            self._call(f"uploading {path}", self._env.upload_file(local, path))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:500]
