"""Task environments behind one interface: :class:`Sandbox` (``base``), its Docker backend
(``docker``), compose projects (``compose``), an in-memory one for unit tests (``memory``), and
the owner labels and sweeps of what dead servers left (``owner``). The backends' names load on
first use, so the interface imports no docker."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .base import LOGS_ARTIFACTS, Sandbox
from .engine_files import EngineRead
from .errors import PathEscapeError, SandboxError, TooLargeError
from .files import resolve_within
from .result import ExecResult

if TYPE_CHECKING:
    from .compose import ComposeSandbox
    from .docker import DockerSandbox
    from .owner import (
        LABEL,
        LABEL_FORK,
        LABEL_OWNER,
        LABEL_TASK,
        owner_alive,
        remove_containers,
        remove_dead_scratch,
        server_identity,
        server_scope,
    )

_LAZY = {
    "ComposeSandbox": "compose",
    "DockerSandbox": "docker",
    **dict.fromkeys(
        [
            "LABEL",
            "LABEL_FORK",
            "LABEL_OWNER",
            "LABEL_TASK",
            "owner_alive",
            "remove_containers",
            "remove_dead_scratch",
            "server_identity",
            "server_scope",
        ],
        "owner",
    ),
}

__all__ = [
    "LABEL",
    "LABEL_FORK",
    "LABEL_OWNER",
    "LABEL_TASK",
    "LOGS_ARTIFACTS",
    "ComposeSandbox",
    "DockerSandbox",
    "EngineRead",
    "ExecResult",
    "PathEscapeError",
    "Sandbox",
    "SandboxError",
    "TooLargeError",
    "owner_alive",
    "remove_containers",
    "remove_dead_scratch",
    "resolve_within",
    "server_identity",
    "server_scope",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
