"""Readiness and the drain against a real server and engine: /ready says 503 with a reason when
every session slot is taken or the server drains (/health stays 200), and SIGTERM lets a running
episode finish (its evaluate scores 1.0) while new sessions are turned away, then removes every
container and exits; a drain that outlasts HARBOR_OPENENV_DRAIN_S ends at the grace period."""

from __future__ import annotations

import json
import signal
import time

import httpx
import pytest
from _server import FIXTURE_TASKS, TOKEN, Server, runtime_containers, wait_until
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

pytestmark = pytest.mark.docker

TASK = "edit-file"


def _ws(srv: Server):
    return connect(srv.url.replace("http", "ws") + "/ws", max_size=None, open_timeout=30)


def _send(ws, kind: str, data: dict) -> dict:
    ws.send(json.dumps({"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=300))


def _ready(srv: Server) -> httpx.Response:
    return httpx.get(srv.url + "/ready", timeout=10)


def test_ready_is_503_with_a_reason_when_every_slot_is_taken(docker_client):
    with Server(FIXTURE_TASKS, HARBOR_OPENENV_MAX_SESSIONS="2") as srv:
        first = _ready(srv)
        assert first.status_code == 200, first.text
        assert first.json() == {
            "status": "ready",
            "reason": None,
            "sessions": 0,
            "sessions_never_reset": 0,
            "episodes": 0,
            "capacity": 2,
            "draining": False,
        }
        with _ws(srv) as one:
            reset = _send(one, "reset", {"task_id": TASK})
            assert reset["data"]["observation"]["error"] is None, reset
            assert _ready(srv).status_code == 200  # 1 of 2 slots
            with _ws(srv) as two:
                assert wait_until(lambda: _ready(srv).status_code == 503, timeout=10)
                full = _ready(srv)
                assert full.json()["status"] == "not ready"
                assert full.json()["reason"].startswith("full: 2 of 2 session slots in use")
                assert httpx.get(srv.url + "/health", timeout=10).status_code == 200
                # With both sessions' episodes running, a plain HTTP reset is refused too.
                assert (
                    _send(two, "reset", {"task_id": TASK})["data"]["observation"]["error"] is None
                )
                refused = httpx.post(srv.url + "/reset", json={"task_id": TASK}, timeout=60)
                assert "at its limit of 2 sessions" in refused.text, refused.text
            # One session gone: a free slot again.
            assert wait_until(lambda: _ready(srv).status_code == 200, timeout=10)
            graded = _send(one, "step", {"action_type": "evaluate", "token": TOKEN})
            assert graded["data"]["done"] is True
        assert wait_until(lambda: _ready(srv).json()["episodes"] == 0, timeout=30)
        assert _ready(srv).json()["sessions"] == 0


def test_sigterm_drains_a_running_episode_to_its_reward_then_exits(docker_client):
    srv = Server(FIXTURE_TASKS, HARBOR_OPENENV_DRAIN_S="120", HARBOR_OPENENV_MAX_SESSIONS="4")
    try:
        prefix = srv.owner_prefix
        with _ws(srv) as ws:
            reset = _send(ws, "reset", {"task_id": TASK})
            assert reset["data"]["observation"]["error"] is None, reset
            sent = time.monotonic()
            srv.process.send_signal(signal.SIGTERM)
            # Not ready at once; still alive.
            assert wait_until(lambda: _ready(srv).status_code == 503, timeout=5, interval=0.05)
            draining = _ready(srv).json()
            assert draining["draining"] is True and draining["reason"].startswith("draining")
            assert httpx.get(srv.url + "/health", timeout=10).status_code == 200
            # A new session is turned away with 1013 and a reason; a plain reset is refused.
            with _ws(srv) as late, pytest.raises(ConnectionClosed) as closed:
                late.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
            assert "draining" in closed.value.rcvd.reason
            refused = httpx.post(srv.url + "/reset", json={"task_id": TASK}, timeout=60)
            assert "draining" in refused.text, refused.text
            # The running episode goes on, well after uvicorn would have closed it.
            time.sleep(3)
            assert srv.process.poll() is None
            wrote = _send(
                ws, "step", {"action_type": "write", "path": "answer.txt", "content": "42"}
            )
            assert wrote["data"]["observation"]["error"] is None, wrote
            graded = _send(ws, "step", {"action_type": "evaluate", "token": TOKEN})
            assert graded["data"]["reward"] == 1.0, graded
            assert graded["data"]["done"] is True
            # The episode has ended: the drain is over and the server stops, closing this socket.
            with pytest.raises(ConnectionClosed):
                for _ in range(100):
                    ws.recv(timeout=60)
        srv.process.wait(timeout=60)
        took = time.monotonic() - sent
        assert took < 60, took  # not the 120 s grace: it stopped when the episode ended
        assert "drained episodes=0" in srv.output, srv.output
        assert runtime_containers(docker_client, prefix) == []
    finally:
        srv.stop()


def test_a_drain_ends_at_its_grace_period_and_removes_the_container(docker_client):
    srv = Server(FIXTURE_TASKS, HARBOR_OPENENV_DRAIN_S="4")
    try:
        prefix = srv.owner_prefix
        with _ws(srv) as ws:
            reset = _send(ws, "reset", {"task_id": TASK})
            assert reset["data"]["observation"]["error"] is None, reset
            assert len(runtime_containers(docker_client, prefix)) == 1
            sent = time.monotonic()
            srv.process.send_signal(signal.SIGTERM)
            srv.process.wait(timeout=60)
            took = time.monotonic() - sent
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
        assert 4 <= took < 40, took  # the grace period, then shutdown
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012  # uvicorn's
        assert "drain timed out episodes=1" in srv.output, srv.output
        assert runtime_containers(docker_client, prefix) == []
    finally:
        srv.stop()


def test_a_second_sigterm_stops_at_once(docker_client):
    srv = Server(FIXTURE_TASKS, HARBOR_OPENENV_DRAIN_S="300")
    try:
        prefix = srv.owner_prefix
        with _ws(srv) as ws:
            _send(ws, "reset", {"task_id": TASK})
            srv.process.send_signal(signal.SIGTERM)
            assert wait_until(lambda: _ready(srv).status_code == 503, timeout=5, interval=0.05)
            sent = time.monotonic()
            srv.process.send_signal(signal.SIGTERM)
            srv.process.wait(timeout=60)
            assert time.monotonic() - sent < 30
        assert runtime_containers(docker_client, prefix) == []
    finally:
        srv.stop()
