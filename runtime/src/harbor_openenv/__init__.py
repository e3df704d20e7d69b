"""Serve Harbor task directories as an OpenEnv environment.

The core (``dataset``, ``reward``, ``manifest``) needs only pydantic. Server and client names load
lazily and need the ``server`` extra: ``pip install 'harbor-openenv[server]'``.
"""

from __future__ import annotations

import importlib

from ._version import __version__

_LAZY = {
    "build_app": "app",
    "HarborEnvClient": "client",
    "agent_tools": "client",
    "HarborEnvironment": "environment",
    "HarborAction": "models",
    "HarborObservation": "models",
    "HarborState": "models",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in {"openenv", "docker", "fastapi", "uvicorn"}:
            raise ImportError(
                f"harbor_openenv.{name} needs the server extra ({exc.name} is not installed):"
                " pip install 'harbor-openenv[server]'"
            ) from exc
        raise
    globals()[name] = value
    return value
