"""The OpenEnv names the runtime uses, imported without gradio unless OpenEnv's web UI is on.

Importing anything under ``openenv.core`` runs ``openenv.core.env_server.__init__``, which imports
OpenEnv's Gradio web interface and with it gradio: seconds and about 80 MB per process, for a UI
that ``create_app`` only builds when ``ENABLE_WEB_INTERFACE`` is true. OpenEnv skips that import
when gradio is not installed (it catches ModuleNotFoundError), so while openenv is imported here
gradio is reported missing, unless the web interface is enabled. Afterwards gradio imports as
usual. Every runtime module takes its OpenEnv names from here, so the first import decides.

Without openenv (the ``client`` extra), the client-side names come from ``_light`` instead, and the
server names raise ModuleNotFoundError for openenv.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

__all__ = [
    "Action",
    "ConcurrencyConfig",
    "EnvClient",
    "Environment",
    "EnvironmentMetadata",
    "Observation",
    "State",
    "StepResult",
    "create_app",
]


def web_interface_enabled() -> bool:
    """Whether OpenEnv's ``create_app`` builds its Gradio UI (its own test of the variable)."""
    return os.getenv("ENABLE_WEB_INTERFACE", "false").lower() in ("true", "1", "yes")


class _HideGradio(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == "gradio" or name.startswith("gradio."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


HAVE_OPENENV = importlib.util.find_spec("openenv") is not None
_SERVER_NAMES = {"ConcurrencyConfig", "Environment", "EnvironmentMetadata", "create_app"}

if HAVE_OPENENV:
    _hide = None if web_interface_enabled() else _HideGradio()
    if _hide is not None:
        sys.meta_path.insert(0, _hide)
    try:
        from openenv.core.client_types import StepResult
        from openenv.core.env_client import EnvClient
        from openenv.core.env_server.http_server import create_app
        from openenv.core.env_server.interfaces import Environment
        from openenv.core.env_server.types import (
            Action,
            ConcurrencyConfig,
            EnvironmentMetadata,
            Observation,
            State,
        )
    finally:
        if _hide is not None:
            sys.meta_path.remove(_hide)
else:  # the client extra: the light stand-ins (see _light), no server
    from ._light import Action, Observation, State, StepResult

    def __getattr__(name: str) -> Any:
        if name == "EnvClient":
            import websockets  # noqa: F401  (ModuleNotFoundError names the client extra's package)

            from ._light import EnvClient

            return EnvClient
        if name in _SERVER_NAMES:
            raise ModuleNotFoundError("No module named 'openenv'", name="openenv")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
