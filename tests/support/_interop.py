"""Harbor's own venv (.ci/interop-tools.sh installs it), and headless Chromium's flags."""

from __future__ import annotations

import os
from pathlib import Path

HARBOR_VENV = Path(
    os.environ.get("HARBOR_OPENENV_HARBOR_VENV")
    or Path.home() / ".cache" / "harbor-openenv" / "harbor-venv"
)

# The runtime with its harbor extra in Python 3.12 (.ci/interop-tools.sh installs it from
# requirements/harbor-server.txt): it serves on Harbor's environment backends.
HARBOR_SERVER_VENV = Path(
    os.environ.get("HARBOR_OPENENV_HARBOR_SERVER_VENV")
    or Path(__file__).resolve().parents[2] / ".cache" / "harbor-server-venv"
)
HARBOR_SERVER_PYTHON = str(HARBOR_SERVER_VENV / "bin" / "python")

# Headless Chromium that stays on 127.0.0.1: without the background-networking flags it calls
# home (updates, sync, QUIC probes).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
