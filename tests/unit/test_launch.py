"""The local-server launcher: healthy or a RuntimeError with the server's output, and stopped."""

from __future__ import annotations

import pytest
from _server import FIXTURE_TASKS

from harbor_openenv.client.launch import Server


def test_server_logs_to_a_file_and_stops_as_a_context_manager(tmp_path):
    log = tmp_path / "server.log"
    with Server(FIXTURE_TASKS, log=log, token="t") as server:
        assert server.health_s > 0 and server.token == "t"
        assert server.url == f"http://127.0.0.1:{server.port}"
    assert server.process.poll() is not None
    assert "Application startup complete" in server.output
    assert server.output == log.read_text()
    server.stop()  # stopping a stopped server does nothing


def test_a_server_that_exits_is_a_runtime_error_with_its_output(tmp_path):
    with pytest.raises(RuntimeError, match="exited with") as raised:
        Server(tmp_path / "no-such-folder")
    assert "no-such-folder" in str(raised.value)


def test_health_answers_without_docker(tmp_path):
    """/health must not touch the engine: point the server at an engine that does not exist."""
    srv = Server(FIXTURE_TASKS, token="t", DOCKER_HOST=f"unix://{tmp_path}/no-such-docker.sock")
    try:
        import httpx

        assert httpx.get(f"{srv.url}/health").json() == {"status": "healthy"}
        with srv.client() as env:
            assert "docker" in env.reset(task_id="edit-file").observation.error.lower()
    finally:
        srv.stop()
