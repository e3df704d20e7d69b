"""Debian's sshd on 127.0.0.1 (a free port), of the test's own: its config, host key and one
client key in a fresh folder, ``docker system dial-stdio`` reaching the engine it is given
(``SetEnv DOCKER_HOST``), and a client's environment: ``HOME`` whose ``~/.ssh`` (config, key,
known_hosts) docker-py's paramiko transport reads, and first on ``PATH`` an ``ssh`` that reads
that config (OpenSSH takes ``~`` from the password database, not ``HOME``), for the compose CLI.
Nothing of the machine's own ``~/.ssh`` is read or written. Needs root (sshd does); .ci/sshd.sh
installs it."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from harbor_openenv.client.launch import free_port, stop_process

SSHD = "/usr/sbin/sshd"


class SshdError(RuntimeError):
    """sshd did not start; the message ends with its log."""


@contextlib.contextmanager
def serve_sshd(docker_host: str) -> Iterator[dict[str, str]]:
    """A client's ``DOCKER_HOST``, ``HOME`` and ``PATH``; sshd stopped and its folder removed
    after."""
    if not Path(SSHD).exists():
        raise SshdError(f"{SSHD} is missing: run .ci/sshd.sh")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation folder
    folder = Path(tempfile.mkdtemp(prefix="hoe-sshd-", dir="/tmp"))
    try:
        port = free_port()
        for name in ("host", "client"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)],
                check=True,
                capture_output=True,
            )
        (folder / "authorized_keys").write_text((folder / "client.pub").read_text())
        config = folder / "sshd_config"
        config.write_text(
            f"ListenAddress 127.0.0.1:{port}\nHostKey {folder / 'host'}\n"
            f"PidFile {folder / 'sshd.pid'}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\n"
            f"StrictModes no\nSetEnv DOCKER_HOST={docker_host}\nMaxSessions 100\n"
            "MaxStartups 100\n"
        )
        home = folder / "home"
        (home / ".ssh").mkdir(parents=True, mode=0o700)
        shutil.copy(folder / "client", home / ".ssh" / "id_ed25519")
        ssh_config = home / ".ssh" / "config"
        ssh_config.write_text(
            f"Host 127.0.0.1\n  IdentityFile {home / '.ssh' / 'id_ed25519'}\n"
            f"  UserKnownHostsFile {home / '.ssh' / 'known_hosts'}\n"
        )
        wrapper = home / "bin" / "ssh"
        wrapper.parent.mkdir()
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {ssh_config} "$@"\n')
        wrapper.chmod(0o755)
        kind, key = (folder / "host.pub").read_text().split()[:2]
        (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{port} {kind} {key}\n")
        log = folder / "sshd.log"
        process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=log.open("wb"))
        try:
            _wait_listening(port, process, log)
            yield {
                "DOCKER_HOST": f"ssh://root@127.0.0.1:{port}",
                "HOME": str(home),
                "PATH": f"{wrapper.parent}:{os.environ['PATH']}",
            }
        finally:
            stop_process(process, 15, 10)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _wait_listening(port: int, process: subprocess.Popen, log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    raise SshdError(f"sshd on 127.0.0.1:{port} did not start:\n{log.read_text()[-2000:]}")
