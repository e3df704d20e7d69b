"""``build_app()``: the FastAPI app a rendered environment's ``server/app.py`` exposes.

Its settings (the tasks folder, session limits, exec and file limits, the orchestration token,
the warm pool, logging) come from one ``config.Settings``: given, or read by
``Settings.from_env()`` from the ``HARBOR_OPENENV_*`` variables (docs/reference/settings.md
lists them all, with their defaults).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from harbor_openenv._openenv import ConcurrencyConfig, create_app
from harbor_openenv.config import Settings
from harbor_openenv.episode.runtime import Runtime
from harbor_openenv.events import Timer, event
from harbor_openenv.events import configure as configure_logging
from harbor_openenv.models import HarborObservation, HarborState, ServedAction
from harbor_openenv.server.environment import HarborEnvironment
from harbor_openenv.server.metadata import environment_about

log = logging.getLogger("harbor_openenv")


class _ObjectMessagesOnly:
    """Turns WebSocket frames that are not a JSON object into a message OpenEnv refuses cleanly.

    OpenEnv's ``/ws`` loop calls ``.get`` on whatever ``json.loads`` returns and reads frames as
    text, so a JSON array, string or number, nesting deep enough to exhaust the parser, or a
    binary frame would end the session. Rewritten, each gets an "Unknown message type" error
    naming the problem and the session goes on.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        async def checked_receive() -> Message:
            message = await receive()
            if message["type"] == "websocket.receive":
                problem = _frame_problem(message.get("text"))
                if problem:
                    text = json.dumps({"type": f"invalid message ({problem})"})
                    message = {"type": "websocket.receive", "text": text}
            return message

        await self.app(scope, checked_receive, send)


class _IdleSessions:
    """Closes a session's WebSocket (``/ws``, ``/mcp``) once it has waited ``idle_s`` for the
    client's next message, or a ``/ws`` session that sent no reset within ``reset_within_s`` of
    opening (0: no such limit), so the session ends the way a client's disconnect ends it: OpenEnv
    destroys it and its environment removes the container. Sockets that never reset cannot hold
    the server's slots for the session timeout; ``runtime`` counts them for ``/ready``.

    OpenEnv's own idle reaper (kept on: it also ends sessions created over HTTP ``/mcp``) destroys
    an idle session's environment but leaves its socket open and its loop reading: before this, a
    reaped session's next reset started a container beyond ``HARBOR_OPENENV_MAX_SESSIONS`` that
    nothing removed until shutdown. Time spent running an action is not idle time: OpenEnv reads
    the next message only after answering the last one.
    """

    PATHS = ("/ws", "/mcp")

    def __init__(
        self, app: ASGIApp, idle_s: float, reset_within_s: float, runtime: Runtime
    ) -> None:
        self.app = app
        self.idle_s = idle_s
        self.reset_within_s = reset_within_s
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket" or scope.get("path") not in self.PATHS:
            await self.app(scope, receive, send)
            return
        closed = False
        pending: asyncio.Future[Message] | None = None
        unreset = scope.get("path") == "/ws" and self.reset_within_s > 0
        reset_by = asyncio.get_running_loop().time() + self.reset_within_s
        if unreset:
            self.runtime.sessions.unreset(+1)

        async def idle_receive() -> Message:
            nonlocal closed, pending, unreset
            if closed:
                return {"type": "websocket.disconnect", "code": 1000}
            if pending is None:
                pending = asyncio.ensure_future(receive())
            wait = self.idle_s
            if unreset:
                wait = min(wait, max(0.0, reset_by - asyncio.get_running_loop().time()))
            done, _ = await asyncio.wait({pending}, timeout=wait)
            if done:
                message, pending = pending.result(), None
                if unreset and _is_reset(message):
                    unreset = False
                    self.runtime.sessions.unreset(-1)
                return message
            closed = True
            pending.cancel()
            if unreset:
                reason = (
                    f"no reset within {self.reset_within_s:g} s of opening"
                    " (HARBOR_OPENENV_RESET_WITHIN_S): session closed"
                )
            else:
                reason = (
                    f"idle for {self.idle_s:g} s (HARBOR_OPENENV_SESSION_TIMEOUT_S): session closed"
                )
            with contextlib.suppress(Exception):  # the client may be gone already
                await send({"type": "websocket.close", "code": 1000, "reason": reason[:120]})
            log.info("closed a WebSocket session: %s", reason)
            return {"type": "websocket.disconnect", "code": 1000}

        async def guarded_send(message: Message) -> None:
            if not closed:  # after the idle close, the app's own close (and anything) is dropped
                await send(message)

        try:
            await self.app(scope, idle_receive, guarded_send)
        finally:
            if pending is not None:
                pending.cancel()
            if unreset:
                self.runtime.sessions.unreset(-1)


def _is_reset(message: Message) -> bool:
    """Whether a received frame is OpenEnv's ``{"type": "reset", ...}``."""
    text = message.get("text")
    if message["type"] != "websocket.receive" or not text or '"reset"' not in text:
        return False
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and value.get("type") == "reset"


class _Sessions:
    """Counts the open WebSocket sessions (``/ws``, ``/mcp``) for ``/ready`` and the metrics, and
    turns new ones away once the server drains: accepted, then closed with 1013 ("try again
    later") and a reason, so the client knows to reconnect (through the balancer, elsewhere)."""

    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket" or scope.get("path") not in _IdleSessions.PATHS:
            await self.app(scope, receive, send)
            return
        if self.runtime.draining.is_set():
            message = await receive()
            if message["type"] == "websocket.connect":
                await send({"type": "websocket.accept"})
                reason = "draining: this server is stopping; reconnect to reach another replica"
                await send({"type": "websocket.close", "code": 1013, "reason": reason})
            return
        self.runtime.sessions.opened()
        limit = self.runtime.pool.limit

        async def send_ours(message: Message) -> None:
            await send(_capacity_in_our_words(message, limit))

        try:
            await self.app(scope, receive, send_ours)
        finally:
            self.runtime.sessions.closed()


def _capacity_in_our_words(message: Message, limit: int) -> Message:
    """OpenEnv's ``CAPACITY_REACHED`` error with the message a plain reset at the limit gets."""
    text = message.get("text") if message["type"] == "websocket.send" else None
    if not text or "CAPACITY_REACHED" not in text:
        return message
    try:
        value = json.loads(text)
    except ValueError:
        return message
    data = value.get("data") if isinstance(value, dict) else None
    if not isinstance(data, dict) or data.get("code") != "CAPACITY_REACHED":
        return message
    data["message"] = (
        f"the server is at its limit of {limit} sessions (HARBOR_OPENENV_MAX_SESSIONS): try"
        " again later, or another replica"
    )
    return {**message, "text": json.dumps(value)}


_OFFLINE_DOCS = "/static-offline-docs"


def _serve_docs_offline(app: FastAPI) -> None:
    """``/docs`` and ``/redoc`` from the Swagger UI and ReDoc files ``fastapi-offline`` ships,
    in place of FastAPI's pages, which load them from a CDN (a blank page on an offline host)."""
    pages = {"/docs", "/redoc"}
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) not in pages]
    static = Path(fastapi_offline.__file__).parent / "static"
    app.mount(_OFFLINE_DOCS, StaticFiles(directory=static), name="static-offline-docs")
    openapi = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=root + openapi,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{_OFFLINE_DOCS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{_OFFLINE_DOCS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{_OFFLINE_DOCS}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=root + openapi,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{_OFFLINE_DOCS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{_OFFLINE_DOCS}/favicon.png",
            with_google_fonts=False,
        )


def _drain_on_sigterm(runtime: Runtime) -> None:
    """Put the drain in front of uvicorn's SIGTERM handling (uvicorn closes every WebSocket at
    once when it gets the signal). Runs at startup, when uvicorn has installed its handlers.

    On SIGTERM the server is not ready at once (``/ready`` 503, new sessions and resets refused),
    the running episodes get ``HARBOR_OPENENV_DRAIN_S`` seconds to end, then uvicorn's own
    handler runs: it closes the sessions left and shutdown removes every container. A second
    SIGTERM stops at once. SIGINT (Ctrl-C) stops at once as before.
    """
    drain_s = runtime.settings.drain_s
    if drain_s <= 0 or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous):  # not under a server that handles SIGTERM itself (uvicorn does)
        return
    stop: Callable[[int, FrameType | None], Any] = previous
    started = threading.Event()

    def finish() -> None:
        timer = Timer()
        event("drain", episodes=runtime.pool.active, grace_s=drain_s)
        drained = runtime.drain(drain_s)
        left = runtime.pool.active
        event("drained" if drained else "drain timed out", episodes=left, seconds=timer.seconds)
        stop(signal.SIGTERM, None)

    def on_sigterm(sig: int, frame: FrameType | None) -> None:
        if started.is_set():
            stop(sig, frame)
            return
        started.set()
        runtime.draining.set()  # before this handler returns: /ready says 503 from now on
        threading.Thread(target=finish, name="harbor-openenv-drain", daemon=True).start()

    signal.signal(signal.SIGTERM, on_sigterm)


_OBJECT_START = re.compile(r"\s*\{")


def _frame_problem(text: str | None) -> str | None:
    """Why a frame cannot be an OpenEnv message, or None (invalid JSON OpenEnv reports itself)."""
    if text is None:
        return "a binary frame; send JSON text"
    is_object = _OBJECT_START.match(text) is not None
    if is_object and text.count("[") + text.count("{") < 500:
        return None  # the common case: no need to parse twice
    try:
        value = json.loads(text)
    except RecursionError:
        return "JSON nested too deeply"
    except ValueError:
        return None
    if isinstance(value, dict):
        return None
    return f"expected a JSON object, got {type(value).__name__}"


def _default_tasks(caller_file: str | None) -> Path:
    """``tasks/`` beside the app module or its parent (``server/app.py`` → ``../tasks``)."""
    if caller_file:
        here = Path(caller_file).resolve().parent
        for folder in (here, here.parent):
            if (folder / "tasks").is_dir():
                return folder / "tasks"
    return Path.cwd() / "tasks"


def build_app(
    tasks: str | Path | None = None,
    *,
    settings: Settings | None = None,
    max_sessions: int | None = None,
    session_timeout_s: float | None = None,
) -> FastAPI:
    """Create the OpenEnv app serving the tasks folder.

    ``settings`` default to ``Settings.from_env()`` (ValueError names a malformed variable);
    ``tasks``, ``max_sessions`` and ``session_timeout_s`` override theirs.
    """
    settings = settings or Settings.from_env()
    configure_logging(settings)  # episode and image lines on stderr, beside uvicorn's (see events)
    caller = sys._getframe(1).f_globals.get("__file__")
    root = Path(tasks or settings.tasks or _default_tasks(caller))
    sessions = max_sessions or settings.max_sessions
    runtime = Runtime(root, settings, max_sessions=sessions)
    idle = session_timeout_s or settings.session_timeout_s
    app: FastAPI = create_app(
        functools.partial(HarborEnvironment, runtime),
        ServedAction,  # the token never leaves the server (the web page logs whole actions)
        HarborObservation,
        env_name="harbor_openenv",
        # Without a session timeout OpenEnv's idle reaper is off and leaked sessions hold their
        # slots (and containers) until the server restarts (OpenEnv issue #1000).
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=sessions, session_timeout=idle),
        state_cls=HarborState,
        # the web page's title: the environment's name (openenv.yaml), not "Harbor Openenv"
        title_override=environment_about(root, settings.env_name, settings.env_version)["name"],
    )
    _serve_docs_offline(app)
    app.state.runtime = runtime
    app.add_middleware(_ObjectMessagesOnly)
    app.add_middleware(
        _IdleSessions, idle_s=idle, reset_within_s=settings.reset_within_s, runtime=runtime
    )
    app.add_middleware(_Sessions, runtime=runtime)

    @app.get("/ready", tags=["Health"], summary="Readiness: can this replica take a new session?")
    def ready() -> JSONResponse:
        """200 when a session slot is free and the server is not draining, else 503 and why.
        Never calls Docker. ``/health`` stays the liveness answer."""
        reason = runtime.not_ready()
        now = runtime.snapshot(containers=False)
        body: dict[str, object] = {
            "status": "not ready" if reason else "ready",
            "reason": reason,
            "sessions": now.sessions,
            "sessions_never_reset": now.unreset,
            "episodes": now.episodes,
            "capacity": now.capacity,
            "draining": now.draining,
        }
        if now.engines:  # several engines: which are up
            body["engines"] = [
                {"engine": one.name, "up": one.up, "episodes": one.episodes, "error": one.error}
                for one in now.engines
            ]
        return JSONResponse(body, status_code=503 if reason else 200)

    @app.get("/metrics", tags=["Health"], summary="Prometheus metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(runtime.metrics.scrape(), media_type=CONTENT_TYPE_LATEST)

    def _remove_orphans() -> None:
        try:
            removed = runtime.backend.sweep()
            folders = runtime.backend.sweep_scratch()
        except Exception as exc:  # the engine may be down; /health still answers
            log.warning("could not look for containers left by dead servers: %s", exc)
            return
        if removed:
            log.warning("removed %d containers left behind by servers that died", removed)
        if folders:
            log.warning("removed %d compose project folders of servers that died", folders)

    def _remove_own() -> None:
        runtime.shutdown()

    def _prewarm() -> None:
        try:
            runtime.prewarm()
        except Exception as exc:  # a reset reports the same problem to its caller
            log.warning("could not prewarm the container pool: %s", exc)

    app.router.on_startup.append(_remove_orphans)
    app.router.on_startup.append(functools.partial(_drain_on_sigterm, runtime))
    if runtime.settings.pool_size:  # in the background: the default task's image may need a build
        app.router.on_startup.append(threading.Thread(target=_prewarm, daemon=True).start)
    app.router.on_shutdown.append(_remove_own)

    return app
