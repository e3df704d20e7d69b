"""The Docker backend: one container per episode through docker-py and the engine's exec API.

Containers carry the owner labels of :mod:`.owner`, so a server removes its own at shutdown and,
at startup, the ones a dead server left behind. Two fixes to docker-py's exec stream live here:
output read along with the response headers is kept (:func:`.stream.read_ahead`), and the
multiplexed frames are read with a deadline (:func:`.stream.frames`), on any transport.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any, cast

import docker
import docker.errors
import requests
from docker.models.containers import Container

from harbor_openenv import helper
from harbor_openenv.helper import contract

from . import stream
from .base import KEEPER_ENTRYPOINT, Sandbox, keeper_command
from .channel import Channel
from .command import Command
from .engine_files import Archive
from .errors import SandboxError
from .owner import LABEL, LABEL_OWNER, LABEL_TASK, remove_container
from .relay import RELAY_USER, Relay
from .result import ExecResult
from .spec import ContainerSpec

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

log = logging.getLogger("harbor_openenv")
_EXIT_WAIT_S = 30.0  # longest wait for the engine to record an ended exec's exit code
_QUOTA_REFUSED = False  # the engine said --storage-opt size does not work here


def _refuse_quota(reason: str) -> None:
    """Remember, for this process, that the engine cannot cap a writable layer."""
    global _QUOTA_REFUSED
    if not _QUOTA_REFUSED:
        log.info("no per-container disk quota on this engine (%s): the disk guard holds", reason)
    _QUOTA_REFUSED = True


class DockerSandbox(Sandbox):
    """A running container for one episode."""

    def __init__(self, client: docker.DockerClient, container: Container) -> None:
        super().__init__()
        self._client = client
        self.container = container

    @classmethod
    def start(
        cls,
        client: docker.DockerClient,
        spec: ContainerSpec,
        *,
        task_id: str | None,
        owner: str,
        labels: dict[str, str] | None = None,
        helper_volume: str,
    ) -> DockerSandbox:
        """Start a container for ``spec`` whose PID 1 is the runtime's keeper
        (:data:`KEEPER_ENTRYPOINT`, as root, the image's ENTRYPOINT its child as the image's
        user), mounted read-only from ``helper_volume``.

        ``labels`` join the runtime's; ``task_id`` None leaves out the task's (a warm-pool
        container serves whichever task asks first). ``spec.storage_mb`` caps the writable layer
        where the engine's storage driver can (overlay2 on xfs with project quotas).
        """
        image = spec.image
        user, entrypoint = image_config(client, image)
        options: dict[str, Any] = {"mounts": [helper.mount(helper_volume)]}
        if spec.storage_mb and not _QUOTA_REFUSED:
            options["storage_opt"] = {"size": f"{spec.storage_mb}M"}
        if spec.cpus:
            options["nano_cpus"] = int(spec.cpus * 1e9)
        if spec.memory_mb:
            options["mem_limit"] = f"{spec.memory_mb}m"
        if spec.network:
            options["network_mode"] = spec.network
        if spec.pids_limit:
            options["pids_limit"] = spec.pids_limit
        run = functools.partial(
            client.containers.run,
            image,
            keeper_command(user, entrypoint),
            entrypoint=list(KEEPER_ENTRYPOINT),
            user="0",  # the keeper; every command runs as its own user
            stdin_open=True,  # the keeper's requests (ask_keeper)
            init=False,  # the keeper must be PID 1, whatever the engine's default
            detach=True,
            labels={
                LABEL: "1",
                LABEL_OWNER: owner,
                **({LABEL_TASK: task_id[:200]} if task_id is not None else {}),
                **(labels or {}),
            },
            environment=dict(spec.env),
            working_dir=spec.workdir or None,
        )
        try:
            try:
                container = cast(Container, run(**options))  # detached: a Container
            except docker.errors.APIError as exc:
                if "storage_opt" not in options or "storage-opt" not in str(exc.explanation):
                    raise
                _refuse_quota(str(exc.explanation))
                del options["storage_opt"]
                container = cast(Container, run(**options))
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"starting a container from {image} failed: {exc.explanation}"
            ) from None
        return cls.attach(client, container, user=user, workdir=spec.workdir)

    @classmethod
    def attach(
        cls,
        client: docker.DockerClient,
        container: Container,
        *,
        user: str,
        workdir: str | None = None,
    ) -> DockerSandbox:
        """Prepare a running container (``/logs``, the workdir, the process baseline) whose
        commands run as ``user`` by default (the image's USER, "" for root); it is removed if
        that fails."""
        sandbox = cls(client, container)
        try:
            sandbox.check_running()
            sandbox.default_user = user
            sandbox.prepare(workdir)
        except BaseException:
            sandbox.remove()
            raise
        return sandbox

    def check_running(self) -> None:
        """Raise :class:`SandboxError` with the container's last log lines if it exited."""
        container = self.container
        container.reload()
        if container.status != "running":
            image = container.image
            raise SandboxError(
                f"the container of {(image.tags or image.id) if image else '?'} exited at"
                f" once ({container.status}):\n{self.logs_tail()}"
            )

    def logs_tail(self) -> str:
        """The container's last 20 lines of output (the keeper's and the ENTRYPOINT's)."""
        try:
            return self.container.logs(tail=20).decode(errors="replace").strip()
        except docker.errors.DockerException:
            return ""

    # -- the primitives ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.container.short_id

    def is_running(self) -> bool:
        """Whether the container still runs (one inspect call)."""
        try:
            self.container.reload()
        except docker.errors.DockerException:
            return False
        return self.container.status == "running"

    def open_channel(self, user: str) -> Channel:
        """The helper's ``serve`` as ``user``: one engine exec, its stdin attached."""
        argv = [helper.HELPER, contract.COMMAND_SERVE]
        return Channel(
            self._attach_helper(argv, user or self.default_user, "the exec channel"), user
        )

    def _attach_helper(self, argv: list[str], user: str, what: str) -> Any:
        """One engine exec of the helper as ``user``, its stdin attached: the socket docker-py
        hands out. Raises :class:`SandboxError` naming ``what`` when the engine refuses."""
        api = self._client.api
        try:
            exec_id = api.exec_create(self.container.id, argv, user=user, stdin=True, workdir="/")[
                "Id"
            ]
            return api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot start {what}: {exc.explanation or exc}") from None

    @contextlib.contextmanager
    def relay(self, port: int, target: tuple[str, int]) -> Iterator[None]:
        """The helper's ``relay PORT`` as :data:`.relay.RELAY_USER`: one engine exec, its stdin
        attached, carrying every connection to ``target``."""
        argv = [helper.HELPER, contract.COMMAND_RELAY, str(port)]
        sock = self._attach_helper(argv, RELAY_USER, "the relay")
        raw = stream.raw_socket(sock)
        try:
            link = Relay(raw, target, stream.read_ahead(sock, raw))
            link.start()
            try:
                yield
            finally:
                link.close()
        finally:
            stream.close(sock)

    def changes(self) -> list[tuple[str, int]]:
        """The engine's list of the container's changes (``GET /containers/{id}/changes``)."""
        try:
            found = self.container.diff() or []
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot list the container's changes: {exc}") from None
        return [(str(entry["Path"]), int(entry["Kind"])) for entry in found]

    def commit(self, labels: Mapping[str, str]) -> str:
        """``docker commit`` of the container's writable layer (paused meanwhile), with the
        configuration of the container's own image put back where the keeper overrode it
        (Entrypoint, Cmd, User, WorkingDir), so a container of the new image starts as one of
        that image does; ``labels`` join the image's."""
        api = _private_api(self._client)
        try:
            source = cast(str, self.container.attrs["Image"])
            config = api.inspect_image(source).get("Config") or {}
            # An absent (null) Entrypoint or empty Cmd would keep the container's, the keeper's:
            # [] says "none"; the runtime ignores Cmd without an ENTRYPOINT, so "sh" stands in.
            entrypoint = config.get("Entrypoint") or []
            command = config.get("Cmd") or (None if entrypoint else ["sh"])
            conf = {
                "Entrypoint": entrypoint,
                "Cmd": command,
                "User": config.get("User") or "0",  # "" would keep the keeper's root: the same
                "WorkingDir": config.get("WorkingDir") or "/",
                "Labels": {**(config.get("Labels") or {}), **labels},
            }
            made = api.commit(self.container.id, conf=conf, pause=True)
        except docker.errors.APIError as exc:
            raise SandboxError(f"committing {self.name} failed: {exc.explanation or exc}") from None
        return cast(str, made["Id"])

    def ask_keeper(self, request: str, *, timeout_s: float) -> str:
        """One line to PID 1's standard input, its answer from its standard output, over an
        attach of the engine's (no program of the container takes part)."""
        api = self._client.api
        params = {"stdin": 1, "stdout": 1, "stream": 1}
        try:
            sock = api.attach_socket(cast(str, self.container.id), params=params)
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot reach the keeper: {exc.explanation or exc}") from None
        raw = stream.raw_socket(sock)
        ident = request.split("\t", 1)[0].encode() + b" "
        buffer = b""
        try:
            raw.sendall(request.encode() + b"\n")
            deadline = time.monotonic() + timeout_s
            for data in stream.frames(raw, deadline, stream.read_ahead(sock, raw)):
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.startswith(ident):  # an earlier request's late answer is skipped
                        return line.decode(errors="replace")
        except TimeoutError:
            raise SandboxError(
                f"the keeper (PID 1) did not answer within {timeout_s:g} s"
            ) from None
        except OSError as exc:
            raise SandboxError(f"lost the keeper's connection: {exc}") from None
        finally:
            stream.close(sock)
        raise SandboxError("the keeper's output ended (is PID 1 the runtime's helper?)")

    def remove(self) -> None:
        """Remove the container (idempotent)."""
        self.channel.close()
        try:
            remove_container(self._client.api, self.container.id or self.name)
        except docker.errors.APIError as exc:
            raise SandboxError(f"removing {self.name} failed: {exc}") from None

    def disk_usage(self) -> int:
        """Bytes in the container's writable layer (apparent sizes), as the engine counts them."""
        api = _private_api(self._client)
        try:
            response = api._get(
                api._url("/containers/{0}/json", self.container.id), params={"size": 1}
            )
            return int(api._result(response, True).get("SizeRw") or 0)
        except (docker.errors.APIError, requests.ConnectionError) as exc:  # or the engine is gone
            raise SandboxError(f"cannot measure the container's disk: {exc}") from None

    def run(self, command: Command) -> ExecResult:
        """Run the command through the engine's exec API. User "" is the image's (the
        container's own is the keeper's root)."""
        api, stdin, max_output = self._client.api, command.stdin, command.max_output
        try:
            exec_id = api.exec_create(
                self.container.id,
                list(command.argv),
                user=command.user or self.default_user,
                environment=[f"{key}={value}" for key, value in command.env.items()],
                workdir=command.workdir,
                stdin=stdin is not None,
            )["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as exc:
            raise SandboxError(f"exec failed: {exc.explanation or exc}") from None
        raw = stream.raw_socket(sock)
        chunks, size, truncated, timed_out = [], 0, False, False
        try:
            if stdin is not None:
                raw.sendall(stdin() if callable(stdin) else stdin)
                stream.close_write(raw)
            deadline = time.monotonic() + command.timeout_s
            for data in stream.frames(raw, deadline, stream.read_ahead(sock, raw)):
                room = max_output - size
                if room > 0:
                    chunks.append(data[:room])
                    size += min(room, len(data))
                truncated = truncated or len(data) > room
        except TimeoutError:
            timed_out = True
        finally:
            stream.close(sock)
        exit_code = None if timed_out else self._exit_code(exec_id)
        raw_output = b"".join(chunks)
        output = raw_output.decode("utf-8", errors="replace")
        return ExecResult(exit_code, output, truncated, timed_out, raw_output)

    def _exit_code(self, exec_id: str) -> int | None:
        """The exit code of an exec whose output has ended. The engine records it a moment
        later, and under load that moment has passed half a second: wait up to
        :data:`_EXIT_WAIT_S` (None: still not recorded by then)."""
        deadline, pause = time.monotonic() + _EXIT_WAIT_S, 0.005
        while True:
            info = self._client.api.exec_inspect(exec_id)
            if not info.get("Running"):
                code = info.get("ExitCode")
                return None if code is None else int(code)
            if time.monotonic() >= deadline:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def upload(self, destination: str, archive: bytes | IO[bytes]) -> None:
        try:
            self.container.put_archive(destination, archive)
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"writing to {destination} failed: {exc.explanation or exc}"
            ) from None

    def engine_mtime(self, path: str) -> str | None:
        """The stat header of ``HEAD /containers/{id}/archive``: nothing is archived."""
        api = _private_api(self._client)
        url = api._url("/containers/{0}/archive", self.container.id)
        try:
            response = api.head(url, params={"path": path}, timeout=api.timeout)
        except requests.RequestException:
            return None
        with response:
            if response.status_code != 200:
                return None
            mtime = _archive_stat(response).get("mtime")
        return str(mtime) if mtime else None

    @contextlib.contextmanager
    def download(self, path: str) -> Iterator[Archive | None]:
        """The engine's archive of ``path``; its size comes from the stat header."""
        api = _private_api(self._client)
        url = api._url("/containers/{0}/archive", self.container.id)
        response = api._get(url, params={"path": path}, stream=True)
        try:
            if response.status_code == 404:
                yield None
                return
            try:
                api._raise_for_status(response)
            except docker.errors.APIError as exc:
                raise SandboxError(f"reading {path} failed: {exc.explanation or exc}") from None
            size = _archive_stat(response).get("size", 0)
            chunks = response.iter_content(1 << 16, decode_unicode=False)
            yield Archive(size, cast(IO[bytes], _StreamReader(chunks)))
        finally:
            response.close()


def image_config(client: docker.DockerClient, image: str) -> tuple[str, list[str] | None]:
    """The image's USER ("" for root) and ENTRYPOINT (None: none)."""
    try:
        config = _private_api(client).inspect_image(image).get("Config") or {}
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot read the image {image}: {exc.explanation or exc}") from None
    return config.get("User") or "", config.get("Entrypoint") or None


def _private_api(client: docker.DockerClient) -> Any:
    """The engine API client, for the request helpers docker-py has but does not declare
    (``_get``, ``_url``, ``_result``, ``_raise_for_status``): untyped, hence Any."""
    return client.api


def _archive_stat(response: requests.Response) -> dict[str, Any]:
    """The ``X-Docker-Container-Path-Stat`` header of an archive response (size, mode, name)."""
    header = response.headers.get("X-Docker-Container-Path-Stat")
    if not header:
        return {}
    try:
        stat = json.loads(base64.b64decode(header))
    except ValueError:
        return {}
    return stat if isinstance(stat, dict) else {}


class _StreamReader(io.RawIOBase):
    """A file object over docker-py's chunk iterator, for streaming tar reads."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target: WriteableBuffer) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        view = memoryview(target).cast("B")
        count = min(len(view), len(self._buffer))
        view[:count] = self._buffer[:count]
        self._buffer = self._buffer[count:]
        return count
