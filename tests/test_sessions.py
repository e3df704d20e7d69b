"""Sessions and their limits against a real server and engine: the token never leaves the server,
every container counts against HARBOR_OPENENV_MAX_SESSIONS whichever route started it, and a
reaped session can neither act nor leave a container behind."""

from __future__ import annotations

import contextlib
import json
import signal

import httpx
import pytest
from conftest import FIXTURE_TASKS, TOKEN, Server, wait_until
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
