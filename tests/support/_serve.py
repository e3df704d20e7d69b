"""The ``harbor-openenv`` command as a user runs it (``serve`` included), for the CLI tests of
several layers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
from _server import FIXTURE_TASKS, wait_until

from harbor_openenv.client.launch import free_port

CLI = [sys.executable, "-m", "harbor_openenv.cli.main"]


def run_cli(*args: object, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``harbor-openenv ARGS`` in this Python; never a traceback (a crash is never a verdict)."""
    result = subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """A usage error: exit 2, nothing on stdout, one line on stderr naming each needle."""
    assert result.returncode == 2, result
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr


def _serve(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, int]:
    """``harbor-openenv serve`` on the fixture tasks, healthy; returns the process and port."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if k != "HARBOR_OPENENV_ORCHESTRATION_TOKEN"}
    process = subprocess.Popen(
        [*CLI, "serve", str(FIXTURE_TASKS), "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**environ, **(env or {})},
    )

    def healthy() -> bool:
        assert process.poll() is None, process.stdout.read()
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        assert wait_until(healthy, 60)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return process, port


def _stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    # uvicorn shuts down gracefully, then re-raises the signal it caught.
    assert process.returncode in (0, -signal.SIGTERM), output
    return output
