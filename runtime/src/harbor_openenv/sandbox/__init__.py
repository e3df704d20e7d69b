"""Task environments behind one interface: :class:`Sandbox` (``base``), its Docker backend
(``docker``), compose projects (``compose``), an in-memory one for unit tests (``memory``), and
the owner labels and sweeps of what dead servers left (``owner``)."""

from .base import EngineRead, Sandbox
from .compose import ComposeSandbox
from .docker import DockerSandbox
from .errors import PathEscapeError, SandboxError, TooLargeError
from .files import resolve_within
from .owner import (
    LABEL,
    LABEL_OWNER,
    LABEL_TASK,
    owner_alive,
    remove_containers,
    remove_dead_scratch,
    server_identity,
    server_scope,
)
from .result import ExecResult

__all__ = [
    "LABEL",
    "LABEL_OWNER",
    "LABEL_TASK",
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
