"""Serve Harbor task directories as an OpenEnv environment.

Subpackages by concept, importing downward only (``tests/unit/test_imports.py`` holds it): ``tasks``
(the task format) and ``datasets`` need only pydantic; ``images``, ``sandbox``, ``episode``,
``server`` the server extra; ``client`` the client extra; ``cli`` on top.
Server and client names load lazily: the client (``HarborEnvClient``, ``agent_tools``, the models)
needs the ``client`` extra (``pip install 'harbor-openenv[client]'``, websockets only), the server
the ``server`` extra.
"""

from __future__ import annotations

import importlib

from ._version import __version__
from .errors import HarborOpenEnvError

_LAZY = {
    "build_app": "server.app",
    "HarborEnvClient": "client.env_client",
    "agent_tools": "client.env_client",
    "HarborEnvironment": "server.environment",
    "Server": "client.launch",
    "run_episode": "client.driver",
    "HarborAction": "models",
    "HarborObservation": "models",
    "HarborState": "models",
}

__all__ = ["HarborOpenEnvError", "__version__", *_LAZY]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    except ModuleNotFoundError as exc:
        missing = exc.name.split(".")[0] if exc.name else ""
        extra = {"websockets": "client"}.get(missing, "server")
        if missing in {"openenv", "docker", "fastapi", "uvicorn", "websockets"}:
            raise ImportError(
                f"harbor_openenv.{name} needs the {extra} extra ({exc.name} is not installed):"
                f" pip install 'harbor-openenv[{extra}]'"
            ) from exc
        raise
    globals()[name] = value
    return value
