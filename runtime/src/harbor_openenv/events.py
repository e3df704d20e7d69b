"""One log line per thing worth knowing: episodes, image builds and pulls, errors.

Everything goes to the ``harbor_openenv`` logger. ``event("reset", task=..., image=...)`` logs
``reset task=hello-world image=python:3.12-slim seconds=0.84`` as text, or with
``HARBOR_OPENENV_LOG_FORMAT=json`` (``Settings.log_format``) one JSON object per line::

    {"time": "2026-11-30T21:05:00.123Z", "level": "info", "logger": "harbor_openenv",
     "event": "reset", "task": "hello-world", "image": "python:3.12-slim", "seconds": 0.84}

Lines logged without ``event`` (warnings) carry ``message`` instead. ``configure()`` gives the
logger its own stderr handler (uvicorn configures only its own loggers, and the root logger has
none, so without it INFO lines would be lost); ``HARBOR_OPENENV_LOG_LEVEL`` sets its level
(default INFO). Where the logger already has a handler (an application configured it), nothing
changes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from .config import Settings

log = logging.getLogger("harbor_openenv")


def _text(value: Any) -> str:
    if isinstance(value, float):
        return str(round(value, 3))
    text = str(value)
    return json.dumps(text) if (not text or any(c.isspace() or c in '"=' for c in text)) else text


Listener = Callable[[str, dict[str, Any]], None]
_listeners: list[Listener] = []


def subscribe(listener: Listener) -> Callable[[], None]:
    """Call ``listener(name, fields)`` for every event from now on, whatever the log level (the
    metrics count image builds and pulls this way); returns the unsubscribe."""
    _listeners.append(listener)

    def unsubscribe() -> None:
        with contextlib.suppress(ValueError):
            _listeners.remove(listener)

    return unsubscribe


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event line: its name, then ``key=value`` for each field that is not None."""
    shown = {key: value for key, value in fields.items() if value is not None}
    for listener in tuple(_listeners):
        try:
            listener(name, shown)
        except Exception:  # a listener never breaks what it listens to
            log.exception("event listener failed on %s", name)
    if not log.isEnabledFor(level):
        return
    message = " ".join([name, *(f"{key}={_text(value)}" for key, value in shown.items())])
    log.log(level, message, extra={"harbor_event": name, "harbor_fields": shown})


class Timer:
    """Seconds since it was made, rounded for a log line."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    @property
    def seconds(self) -> float:
        return round(time.monotonic() - self.start, 3)

    @property
    def elapsed(self) -> float:
        """Seconds, unrounded (for the metrics)."""
        return time.monotonic() - self.start


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        name = getattr(record, "harbor_event", None)
        if name is not None:
            out["event"] = name
            out.update(record.harbor_fields)  # type: ignore[attr-defined]
        else:  # every line has an event: "log" for a line that is only a message
            out["event"] = "log"
            out["message"] = record.getMessage()
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s harbor_openenv: %(message)s"


def configure(settings: Settings | None = None, stream: IO[str] | None = None) -> None:
    """Give the ``harbor_openenv`` logger a stderr handler in the settings' format, once."""
    if log.handlers:
        return
    settings = settings or Settings()
    handler = logging.StreamHandler(stream or sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    log.addHandler(handler)
    try:
        log.setLevel(settings.log_level.strip().upper() or "INFO")
    except ValueError:  # an unknown level name
        log.setLevel(logging.INFO)
    log.propagate = False


class _ClearLine(logging.Formatter):
    """On a terminal, clear the line first (a command's updating progress line may be on it)."""

    def format(self, record: logging.LogRecord) -> str:
        return "\r\033[K" + super().format(record)


def configure_images(stream: IO[str] | None = None) -> None:
    """For the commands that pull and build (check, images): image lines only, as plain text."""
    if log.handlers:
        return
    out = stream or sys.stderr
    handler = logging.StreamHandler(out)
    handler.setFormatter((_ClearLine if out.isatty() else logging.Formatter)("%(message)s"))
    handler.addFilter(lambda record: getattr(record, "harbor_event", "").startswith("image"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
