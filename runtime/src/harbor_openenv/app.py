"""``build_app()``: the FastAPI app a rendered environment's ``server/app.py`` exposes.

Environment variables (all optional):

- ``HARBOR_OPENENV_TASKS``: the tasks folder (default: ``tasks/`` beside the calling app)
- ``HARBOR_OPENENV_MAX_SESSIONS``: concurrent WebSocket sessions (default 8)
- ``HARBOR_OPENENV_SESSION_TIMEOUT_S``: idle seconds before a session is reaped (default 1800)
- ``HARBOR_OPENENV_EXEC_TIMEOUT_S``: default and cap of one exec (default 300)
- ``HARBOR_OPENENV_MAX_OUTPUT_BYTES``: exec output kept per call (default 1 MiB)
- ``HARBOR_OPENENV_MAX_WRITE_BYTES``: largest file content one write accepts (default 8 MiB)
- ``HARBOR_OPENENV_PIDS_LIMIT``: most processes in one task container (default 4096)
- ``HARBOR_OPENENV_ORCHESTRATION_TOKEN``: enables evaluate/solve for callers that send it
- ``HARBOR_OPENENV_DEFAULT_TASK``: the task a reset without a choice starts
- ``HARBOR_OPENENV_POOL_SIZE``: pre-started containers kept per task image and run options, so a
  reset hands one out instead of starting one (default 0: off; see ``pool``)
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
import threading
from pathlib import Path

from fastapi import FastAPI

from ._openenv import ConcurrencyConfig, create_app
from .environment import HarborEnvironment, Runtime, Settings
from .events import configure as configure_logging
from .models import HarborAction, HarborObservation, HarborState

log = logging.getLogger("harbor_openenv")


def settings_from_env(environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    defaults = Settings()

    def number(name: str, default: float, kind=float, *, zero: bool = False):
        raw = env.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = kind(raw)
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not a number") from None
        if value < 0 or (value == 0 and not zero):
            raise ValueError(f"{name}={raw!r} must be {'0 or more' if zero else 'greater than 0'}")
        return value

    return Settings(
        exec_timeout_s=number("HARBOR_OPENENV_EXEC_TIMEOUT_S", defaults.exec_timeout_s),
        max_output_bytes=number("HARBOR_OPENENV_MAX_OUTPUT_BYTES", defaults.max_output_bytes, int),
        max_write_bytes=number("HARBOR_OPENENV_MAX_WRITE_BYTES", defaults.max_write_bytes, int),
        pids_limit=number("HARBOR_OPENENV_PIDS_LIMIT", defaults.pids_limit, int),
        orchestration_token=env.get("HARBOR_OPENENV_ORCHESTRATION_TOKEN") or None,
        default_task=env.get("HARBOR_OPENENV_DEFAULT_TASK") or None,
        pool_size=number("HARBOR_OPENENV_POOL_SIZE", defaults.pool_size, int, zero=True),
    )


class _ObjectMessagesOnly:
    """Turns WebSocket frames that are not a JSON object into a message OpenEnv refuses cleanly.

    OpenEnv's ``/ws`` loop calls ``.get`` on whatever ``json.loads`` returns and reads frames as
    text, so a JSON array, string or number, nesting deep enough to exhaust the parser, or a
    binary frame would end the session. Rewritten, each gets an "Unknown message type" error
    naming the problem and the session goes on.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        async def checked_receive():
            message = await receive()
            if message["type"] == "websocket.receive":
                problem = _frame_problem(message.get("text"))
                if problem:
                    text = json.dumps({"type": f"invalid message ({problem})"})
                    message = {"type": "websocket.receive", "text": text}
            return message

        await self.app(scope, checked_receive, send)


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
    """Create the OpenEnv app serving the tasks folder; arguments override the environment."""
    configure_logging()  # episode and image lines on stderr, beside uvicorn's (see events)
    caller = sys._getframe(1).f_globals.get("__file__")
    root = Path(tasks or os.environ.get("HARBOR_OPENENV_TASKS") or _default_tasks(caller))
    sessions = max_sessions or int(os.environ.get("HARBOR_OPENENV_MAX_SESSIONS", "8"))
    runtime = Runtime(root, settings or settings_from_env(), max_sessions=sessions)
    idle = session_timeout_s or float(os.environ.get("HARBOR_OPENENV_SESSION_TIMEOUT_S", "1800"))
    app = create_app(
        functools.partial(HarborEnvironment, runtime),
        HarborAction,
        HarborObservation,
        env_name="harbor_openenv",
        # Without a session timeout OpenEnv's idle reaper is off and leaked sessions hold their
        # slots (and containers) until the server restarts (OpenEnv issue #1000).
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=sessions, session_timeout=idle),
        state_cls=HarborState,
    )
    app.state.runtime = runtime
    app.add_middleware(_ObjectMessagesOnly)

    def _remove_orphans() -> None:
        try:
            removed = runtime.remove_orphans()
        except Exception as exc:  # the engine may be down; /health still answers
            log.warning("could not look for containers left by dead servers: %s", exc)
            return
        if removed:
            log.warning("removed %d containers left behind by servers that died", removed)

    def _remove_own() -> None:
        runtime.shutdown()

    def _prewarm() -> None:
        try:
            runtime.prewarm()
        except Exception as exc:  # a reset reports the same problem to its caller
            log.warning("could not prewarm the container pool: %s", exc)

    app.router.on_startup.append(_remove_orphans)
    if runtime.settings.pool_size:  # in the background: the default task's image may need a build
        app.router.on_startup.append(threading.Thread(target=_prewarm, daemon=True).start)
    app.router.on_shutdown.append(_remove_own)

    return app
