"""Sessions and their limits against a real server and engine: the token never leaves the server,
every container counts against HARBOR_OPENENV_MAX_SESSIONS whichever route started it, and a
reaped session can neither act nor leave a container behind."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import FIXTURE_TASKS, TOKEN, Server, runtime_containers, wait_until
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
    output, _ = srv.process.communicate(timeout=60)
    return output.decode(errors="replace")


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
