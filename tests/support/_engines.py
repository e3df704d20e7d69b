"""Extra Docker engines on this machine, one ``dockerd`` process each: the "nodes" of the
scale-out test and benchmark.

Each engine has its own ``--data-root``, ``--exec-root``, ``--pidfile`` and unix socket under a
fresh folder in /tmp (short: a unix socket path holds 108 bytes), and the flags of the machine's
own engine (``.ci/daemon.json``, which .ci/docker-engine.sh installs: no bridge, no iptables).
dockerd starts its own containerd with its config, state and socket under the exec root and its
content under the data root, so engines share nothing. Needs root, as dockerd does.

``Engine.stop`` is bounded: SIGTERM (dockerd stops its containers and its containerd), kill -9
after the timeout, then every process still naming the engine's folder (its containerd, its
shims), then the mounts under the folder, then the folder itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
from _certs import make_certs

from harbor_openenv.client.launch import stop_process

ROOT = Path(__file__).resolve().parents[2]
DAEMON_JSON = ROOT / ".ci" / "daemon.json"
DOCKERD = shutil.which("dockerd") or "/usr/sbin/dockerd"


class EngineError(RuntimeError):
    """An extra engine did not start; the message ends with its log."""


class Engine:
    """A ``dockerd`` of its own, started and answering; ``host`` is its ``DOCKER_HOST``."""

    def __init__(self, name: str, *, timeout: float = 60, tls_port: int | None = None) -> None:
        """``tls_port``: also listen on ``tcp://127.0.0.1:PORT`` with ``--tlsverify``, by
        certificates made here (``tls_env`` is a client's environment for it)."""
        if os.geteuid() != 0:
            raise EngineError("extra Docker engines need root (dockerd runs as root)")
        if not Path(DOCKERD).exists():
            raise EngineError(f"{DOCKERD} is missing: run .ci/docker-engine.sh")
        self.name = name
        self.folder = Path(tempfile.mkdtemp(prefix=f"hoe-{name}-", dir="/tmp"))
        self.host = f"unix://{self.folder / 'docker.sock'}"
        self.log = self.folder / "dockerd.log"
        argv = [DOCKERD, "--config-file", str(DAEMON_JSON), "--host", self.host]
        self.tcp: str | None = None
        self.certs: Path | None = None
        if tls_port is not None:
            server, self.certs = make_certs(self.folder / "certs")
            self.tcp = f"tcp://127.0.0.1:{tls_port}"
            argv += ["--host", self.tcp, "--tlsverify", "--tlscacert", str(server / "ca.pem")]
            argv += ["--tlscert", str(server / "server.pem")]
            argv += ["--tlskey", str(server / "server-key.pem")]
        for flag, path in (("--data-root", "data"), ("--exec-root", "exec"), ("--pidfile", "pid")):
            argv += [flag, str(self.folder / path)]
        self._argv = argv
        self.client: docker.DockerClient | None = None
        try:
            self.start_daemon(timeout)
        except BaseException:
            self.stop()
            raise

    def start_daemon(self, timeout: float = 60) -> None:
        """Start the engine's ``dockerd`` (again, after :meth:`stop_daemon`: its data kept) and
        wait until it answers."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self._argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.client = self._wait_up(timeout)

    def stop_daemon(self, timeout: float = 60) -> None:
        """Stop the ``dockerd`` alone (it stops its containers and its containerd), keeping its
        folder, as an engine that went down does."""
        if self.client is not None:
            self.client.close()
            self.client = None
        stop_process(self.process, signal.SIGTERM, timeout)

    @property
    def tls_env(self) -> dict[str, str]:
        """Docker's own settings for a client of the TLS listener."""
        assert self.tcp is not None and self.certs is not None, "started without tls_port"
        return {
            "DOCKER_HOST": self.tcp,
            "DOCKER_TLS_VERIFY": "1",
            "DOCKER_CERT_PATH": str(self.certs),
        }

    def load_images(self, source: docker.DockerClient, *names: str) -> None:
        """Copy images from another engine (``docker save`` there, ``load`` here), in one archive
        (layers they share travel once)."""
        assert self.client is not None
        api: Any = source.api  # docker-py's request helpers, undeclared
        saved = api._get(api._url("/images/get"), params={"names": list(names)}, stream=True)
        archive = b"".join(api._stream_raw_result(saved, 1 << 20, False))
        # The engine loads while its answer is read: an unread answer closes the request early,
        # and only the first images would arrive.
        for event in self.client.api.load_image(archive):
            if "error" in event:
                raise EngineError(f"engine {self.name} did not load {names}: {event['error']}")

    def _wait_up(self, timeout: float) -> docker.DockerClient:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(docker.errors.DockerException, OSError):
                client = docker.DockerClient(base_url=self.host, timeout=300)
                client.ping()
                return client
            time.sleep(0.1)
        tail = self.log.read_text(errors="replace")[-3000:]
        raise EngineError(f"engine {self.name} ({self.host}) did not start:\n{tail}")

    def stop(self, timeout: float = 60, *, keep_log: Path | None = None) -> None:
        """Stop the engine and remove its folder (its log copied to ``keep_log`` first, if
        given); bounded by about ``timeout`` + 10 s."""
        if self.client is not None:
            self.client.close()
        stop_process(self.process, signal.SIGTERM, timeout)
        if keep_log is not None:
            with contextlib.suppress(OSError):
                shutil.copyfile(self.log, keep_log / f"dockerd-{self.name}.log")
        remove_engine_folder(self.folder)

    def processes(self) -> list[int]:
        """Processes whose command line names this engine's folder (its containerd, shims)."""
        return processes_naming(self.folder)


def processes_naming(folder: Path) -> list[int]:
    """Processes whose command line names ``folder`` (an engine's dockerd, containerd, shims)."""
    needle = str(folder).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def remove_engine_folder(folder: Path) -> None:
    """What is left of a stopped engine whose folder is ``folder``: every process still naming it
    killed, the mounts under it unmounted (deepest first), the folder removed."""
    for pid in processes_naming(folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    points = [
        line.split(" ")[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split(" ")[4].startswith(f"{folder}/")
    ]
    for mount in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, timeout=10, check=False)
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def engines(count: int, logs: Path | None = None) -> Iterator[list[Engine]]:
    """``count`` engines started at once, all stopped and removed after (also on failure), their
    logs kept in the folder ``logs`` if given."""
    started: list[Engine] = []

    def start(n: int) -> Engine:
        engine = Engine(f"e{n}")
        started.append(engine)
        return engine

    try:
        with ThreadPoolExecutor(count) as pool:
            ready = list(pool.map(start, range(1, count + 1)))
        yield ready
    finally:
        with ThreadPoolExecutor(max(len(started), 1)) as pool:
            list(pool.map(lambda engine: engine.stop(keep_log=logs), started))
