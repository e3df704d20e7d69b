"""What a sandbox operation raises; every message is meant for the agent or the operator."""

from __future__ import annotations

from harbor_openenv.errors import HarborOpenEnvError


class SandboxError(HarborOpenEnvError):
    """A sandbox operation failed."""


class PathEscapeError(SandboxError):
    """An agent path points outside the working directory."""


class TooLargeError(SandboxError):
    """A file or folder read from a sandbox is over its limit."""
