"""A local server in its own process: ``with Server(tasks) as server:``, healthy on 127.0.0.1.

uvicorn serves ``build_app`` as a rendered repo's image does, with ``HARBOR_OPENENV_TASKS`` and
an orchestration token set; the tests, the benchmark and ``scripts/parity.py`` start theirs with
it, and a trainer can too (``server.client()`` connects,
:mod:`~harbor_openenv.client.driver` drives).
Needs the server extra in this Python.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harbor_openenv.client.env_client import HarborEnvClient

# How often start-up is probed: a connect attempt, cheap enough to time /health to 5 ms.
_PROBE_S = 0.005
# Loopback never goes through a proxy, whatever HTTP_PROXY says.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    """A TCP port nothing listens on at the moment, on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process(
    process: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 60
) -> None:
    """Send ``sig`` to a running ``process`` and wait for it; kill it after ``timeout`` s."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Server:
    """``uvicorn --factory harbor_openenv.server.app:build_app`` on a free port, started and
    healthy.

    ``env`` adds to (or overrides) this process's environment, e.g. ``HARBOR_OPENENV_POOL_SIZE``.
    ``HARBOR_OPENENV_DRAIN_S`` is 0 unless given (here or in this process's environment), so
    :meth:`stop` stops at once; give it to test the drain.
    ``token``: the orchestration token (default: a fresh one). ``port``: the port to listen on
    (default: a free one; a replica restarted behind a balancer keeps its port). ``log``: a file
    for the server's output, which is otherwise kept in memory; ``output`` reads it either way.
    ``prefix``: a command the server runs under (e.g. ``unshare``), which ends by running its
    arguments in its own process. ``python``: the interpreter that runs it (default: this
    one's), whose environment has the runtime's server extra. ``health_s``: the seconds from
    launch to the first healthy ``/health``. Raises RuntimeError, with the output, when the
    server exits or is not healthy within ``timeout`` seconds.
    """

    def __init__(
        self,
        tasks: Path,
        *,
        token: str | None = None,
        port: int | None = None,
        log: Path | None = None,
        timeout: float = 120,
        prefix: Sequence[str] = (),
        python: str | None = None,
        **env: str,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token or secrets.token_hex(16)
        self.log = log
        environ = {
            "HARBOR_OPENENV_DRAIN_S": "0",
            **os.environ,
            "HARBOR_OPENENV_TASKS": str(tasks),
            "HARBOR_OPENENV_ORCHESTRATION_TOKEN": self.token,
            **env,
        }
        command = [
            *prefix,
            python or sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "harbor_openenv.server.app:build_app",
        ]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        self._lines: list[str] = []
        self._reader: threading.Thread | None = None
        self._log_file: IO[bytes] | None = log.open("wb") if log is not None else None
        started = time.perf_counter()
        self.process = subprocess.Popen(
            command,
            env=environ,
            stdout=self._log_file or subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        if self._log_file is None:
            # Read the output as it comes, so a long session never fills the pipe and blocks
            # the server.
            self._reader = threading.Thread(target=self._read_output, daemon=True)
            self._reader.start()
        self.health_s = self._wait_healthy(started, timeout)

    @property
    def output(self) -> str:
        """What the server wrote to stdout and stderr so far."""
        if self.log is not None:
            return self.log.read_text(errors="replace")
        return "".join(self._lines)

    @property
    def owner_prefix(self) -> str:
        """The start of the owner label on this server's containers (its scope and PID)."""
        from harbor_openenv.sandbox import server_scope

        return f"{server_scope()}:{self.process.pid}:"

    def client(self, **kwargs: Any) -> HarborEnvClient:
        """A new client session with this server's token."""
        from harbor_openenv.client.env_client import HarborEnvClient

        return HarborEnvClient(self.url, orchestration_token=self.token, **kwargs)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> None:
        """Send ``sig`` (SIGTERM: the server removes its containers) and wait; kill after
        ``timeout`` seconds. Stopping a stopped server does nothing."""
        stop_process(self.process, sig, timeout)
        if self._reader is not None:
            self._reader.join(timeout=5)  # the pipe ends with the process
            if not self._reader.is_alive() and self.process.stdout is not None:
                self.process.stdout.close()
        if self._log_file is not None:
            self._log_file.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _read_output(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.append(line.decode(errors="replace"))

    def _wait_healthy(self, started: float, timeout: float) -> float:
        """Seconds from ``started`` to a 200 from /health; probes the port first (cheap)."""
        while time.perf_counter() - started < timeout:
            if self.process.poll() is not None:
                if self._reader is not None:
                    self._reader.join(timeout=5)
                self.stop()
                raise RuntimeError(
                    f"the server exited with {self.process.returncode}:\n{self.output}"
                )
            if self._healthy():
                return time.perf_counter() - started
            time.sleep(_PROBE_S)
        self.stop()
        raise RuntimeError(f"the server was not healthy in {timeout:g} s:\n{self.output}")

    def _healthy(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False  # not listening yet
        try:
            with _DIRECT.open(f"{self.url}/health", timeout=1) as response:
                status: int = response.status
                return status == 200
        except (urllib.error.URLError, OSError):
            return False
