"""Sessions and their limits against a real server and engine: the token never leaves the server,
every container counts against HARBOR_OPENENV_MAX_SESSIONS whichever route started it, and a
reaped session can neither act nor leave a container behind."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from _server import FIXTURE_TASKS, TOKEN, Server, runtime_containers, wait_until
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

pytestmark = pytest.mark.docker

TASK = "edit-file"


def _ws(srv: Server, path: str = "/ws"):
    return connect(srv.url.replace("http", "ws") + path, max_size=None, open_timeout=30)


def _send(ws, kind: str, data: dict) -> dict:
    ws.send(json.dumps({"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=300))


def _stop_with_output(srv: Server) -> str:
    srv.process.send_signal(signal.SIGTERM)
    srv.process.wait(timeout=60)
    output = srv.output
    srv.stop()
    return output


# -- item 14: the token never leaves the server --------------------------------------------------


def test_web_page_never_broadcasts_or_returns_the_token(docker_client):
    """An operator's evaluate from /web reaches every /ws/ui visitor's action log without the
    token; no response, error or log line of any route carries it."""
    srv = Server(FIXTURE_TASKS, ENABLE_WEB_INTERFACE="true", HARBOR_OPENENV_DEFAULT_TASK=TASK)
    seen: list[str] = []
    try:
        with _ws(srv, "/ws/ui") as visitor:
            seen.append(visitor.recv(timeout=60))  # the state on connecting
            web = httpx.Client(base_url=srv.url, timeout=300)
            seen.append(web.post("/web/reset", json={"task_id": TASK}).text)
            write = {"action_type": "write", "path": "answer.txt", "content": "42"}
            seen.append(web.post("/web/step", json={"action": write}).text)
            evaluate = web.post(
                "/web/step", json={"action": {"action_type": "evaluate", "token": TOKEN}}
            )
            seen.append(evaluate.text)
            assert evaluate.json()["reward"] == 1.0, evaluate.text  # the token was honoured

            def logged_evaluate() -> bool:
                with contextlib.suppress(TimeoutError):
                    seen.append(visitor.recv(timeout=1))
                return any('"evaluate"' in message and "action_logs" in message for message in seen)

            assert wait_until(logged_evaluate, timeout=60), seen
            seen.append(web.get("/web/state").text)
            # A refused token (a wrong one) and the plain routes: never echoed either.
            wrong = web.post(
                "/web/step", json={"action": {"action_type": "solve", "token": TOKEN + "x"}}
            )
            seen.append(wrong.text)
            with _ws(srv) as ws:
                seen.append(json.dumps(_send(ws, "reset", {"task_id": TASK})))
                graded = _send(ws, "step", {"action_type": "evaluate", "token": TOKEN})
                assert graded["data"]["done"] is True, graded
                seen.append(json.dumps(graded))
                seen.append(json.dumps(_send(ws, "state", {})))
            plain = {"action": {"action_type": "evaluate", "token": TOKEN}}
            seen.append(web.post("/step", json=plain).text)
            seen.append(web.get("/schema").text)
            while True:
                try:
                    seen.append(visitor.recv(timeout=1))
                except TimeoutError:
                    break
    finally:
        output = _stop_with_output(srv)
    leaks = [message for message in [*seen, output] if TOKEN in message]
    assert not leaks, leaks[:2]
    assert any('"action_type": "evaluate"' in m or '"action_type":"evaluate"' in m for m in seen)


# -- item 13: every container counts against the session limit -----------------------------------


class _Peak:
    """The most containers of one server seen at once, polled in the background."""

    def __init__(self, docker_client, srv: Server) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(docker_client, srv), daemon=True)
        self._thread.start()

    def _poll(self, docker_client, srv: Server) -> None:
        while not self._stop.is_set():
            running = len(runtime_containers(docker_client, srv.owner_prefix))
            self.most = max(self.most, running)
            self._stop.wait(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


def test_plain_http_resets_count_against_the_session_limit(docker_client):
    srv = Server(FIXTURE_TASKS, HARBOR_OPENENV_MAX_SESSIONS="2")
    peak = _Peak(docker_client, srv)
    try:
        with ThreadPoolExecutor(16) as burst:
            replies = list(
                burst.map(
                    lambda _: httpx.post(f"{srv.url}/reset", json={"task_id": TASK}, timeout=300),
                    range(16),
                )
            )
        errors = [reply.json()["observation"]["error"] for reply in replies]
        refused = [error for error in errors if error and "at its limit of 2 sessions" in error]
        started = [error for error in errors if error is None]
        assert started and len(started) + len(refused) == 16, errors
        # Two /ws sessions hold both places: a plain HTTP reset is refused, starts nothing.
        with _ws(srv) as one, _ws(srv) as two:
            for ws in (one, two):
                assert _send(ws, "reset", {"task_id": TASK})["data"]["observation"]["error"] is None
            held = len(runtime_containers(docker_client, srv.owner_prefix))
            reply = httpx.post(f"{srv.url}/reset", json={"task_id": TASK}, timeout=300).json()
            assert "at its limit of 2 sessions" in reply["observation"]["error"], reply
            assert reply["done"] is True
            assert len(runtime_containers(docker_client, srv.owner_prefix)) == held == 2
            # A session's next reset waits for its previous container's removal: never refused.
            for _ in range(3):
                again = _send(one, "reset", {"task_id": TASK})["data"]["observation"]
                assert again["error"] is None, again
    finally:
        most = peak.stop()
        srv.stop()
    print(
        f"16 concurrent HTTP resets, limit 2: {len(started)} ran, {len(refused)} refused;"
        f" at most {most} containers at once"
    )
    assert most <= 2, most
    assert wait_until(lambda: not runtime_containers(docker_client, srv.owner_prefix))


# -- item 12: a reaped session neither acts nor leaks --------------------------------------------

IDLE_S = 10


def test_idle_sessions_are_closed_and_leave_no_container(docker_client):
    """Two idle sessions at the limit: their sockets are closed once idle, their containers go,
    and their places serve new sessions; nothing runs beyond the limit at any time."""
    srv = Server(
        FIXTURE_TASKS,
        HARBOR_OPENENV_MAX_SESSIONS="2",
        HARBOR_OPENENV_SESSION_TIMEOUT_S=str(IDLE_S),
    )
    peak = _Peak(docker_client, srv)
    sockets = contextlib.ExitStack()
    try:
        idle = [sockets.enter_context(_ws(srv)) for _ in range(2)]
        for ws in idle:
            assert _send(ws, "reset", {"task_id": TASK})["data"]["observation"]["error"] is None
        assert len(runtime_containers(docker_client, srv.owner_prefix)) == 2
        # A session busy longer than the idle time is not idle: only waiting for a message is.
        busy = _send(idle[0], "step", {"action_type": "exec", "command": f"sleep {IDLE_S + 3}"})
        assert busy["data"]["observation"]["exit_code"] == 0, busy
        went_idle = time.monotonic()
        for ws in idle:
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=IDLE_S * 4)  # the server closes it; no message comes first
            assert "idle" in closed.value.rcvd.reason, closed.value.rcvd
            with pytest.raises(ConnectionClosed):  # and nothing more is accepted on it
                _send(ws, "reset", {"task_id": TASK})
        closed_after = time.monotonic() - went_idle
        assert wait_until(lambda: not runtime_containers(docker_client, srv.owner_prefix)), (
            runtime_containers(docker_client, srv.owner_prefix)
        )
        # Their places are free again: two new sessions run episodes.
        with _ws(srv) as one, _ws(srv) as two:
            for ws in (one, two):
                reply = _send(ws, "reset", {"task_id": TASK})["data"]["observation"]
                assert reply["error"] is None, reply
            step = {"action_type": "write", "path": "answer.txt", "content": "42"}
            assert _send(one, "step", step)["data"]["observation"]["error"] is None
    finally:
        sockets.close()
        most = peak.stop()
        srv.stop()
    print(
        f"idle sessions closed {closed_after:.0f} s after going idle ({IDLE_S} s timeout);"
        f" at most {most} containers with a limit of 2"
    )
    assert most <= 2, most
    assert wait_until(lambda: not runtime_containers(docker_client, srv.owner_prefix))


def test_a_session_reaped_during_a_long_action_refuses_everything_after(docker_client):
    """OpenEnv's own reaper counts a session's time inside an action as idle: it destroys a
    session whose exec outlasts the timeout, right after the exec answers. The session must then
    refuse every message (before: its next reset started a container nothing ever removed)."""
    srv = Server(
        FIXTURE_TASKS,
        HARBOR_OPENENV_MAX_SESSIONS="2",
        HARBOR_OPENENV_SESSION_TIMEOUT_S=str(IDLE_S),
    )
    try:
        with _ws(srv) as ws:
            assert _send(ws, "reset", {"task_id": TASK})["data"]["observation"]["error"] is None
            # OpenEnv's reaper looks every 5 s: two looks fall inside this exec's last 11 s, so
            # one late look under load still reaps it.
            long = _send(ws, "step", {"action_type": "exec", "command": f"sleep {IDLE_S + 11}"})
            assert long["data"]["observation"]["exit_code"] == 0, long
            replies = [
                _send(ws, "reset", {"task_id": TASK}),
                _send(ws, "step", {"action_type": "exec", "command": "true"}),
            ]
            for reply in replies:
                observation = reply["data"]["observation"]
                assert "session has been closed" in (observation["error"] or ""), reply
                assert reply["data"]["done"] is True
            assert wait_until(lambda: not runtime_containers(docker_client, srv.owner_prefix))
    finally:
        srv.stop()
    assert not runtime_containers(docker_client, srv.owner_prefix)


def test_sockets_that_never_reset_free_their_slots(docker_client):
    """Round three, item 4: eight idle unauthenticated sockets held every slot for the session
    timeout (30 minutes), so /ready said 503 and trainers were refused. A session that sends no
    reset within HARBOR_OPENENV_RESET_WITHIN_S is closed; /ready counts those still waiting."""
    srv = Server(FIXTURE_TASKS, HARBOR_OPENENV_MAX_SESSIONS="8", HARBOR_OPENENV_RESET_WITHIN_S="3")
    sockets = contextlib.ExitStack()
    try:
        idle = [sockets.enter_context(_ws(srv)) for _ in range(8)]
        ready = httpx.get(srv.url + "/ready", timeout=10)
        assert ready.status_code == 503, ready.text
        assert ready.json()["sessions_never_reset"] == 8, ready.json()
        assert "8 of them never reset" in ready.json()["reason"]
        opened = time.monotonic()
        for ws in idle:
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
            assert "no reset within 3 s" in closed.value.rcvd.reason, closed.value.rcvd
        waited = time.monotonic() - opened
        assert wait_until(lambda: httpx.get(srv.url + "/ready", timeout=10).status_code == 200)
        assert httpx.get(srv.url + "/ready", timeout=10).json()["sessions_never_reset"] == 0
        with _ws(srv) as trainer:  # a trainer that resets at once is served, and kept open
            reply = _send(trainer, "reset", {"task_id": TASK})["data"]["observation"]
            assert reply["error"] is None, reply
            time.sleep(4)
            step = {"action_type": "exec", "command": "true"}
            assert _send(trainer, "step", step)["data"]["observation"]["exit_code"] == 0
    finally:
        sockets.close()
        srv.stop()
    print(f"eight sockets that never reset were closed {waited:.1f} s after opening (limit 3 s)")
    assert waited < 10
