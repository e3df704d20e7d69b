"""Agent harnesses run as an episode's agent: one beside the container acting through the sandbox,
or one installed inside it reaching the model through a relayed port. See :mod:`.base`; the
harnesses by name are in :mod:`.registry`, the capture proxy in :mod:`.capture`."""

from .base import Budget, Harness, HarnessError, HarnessResult, HarnessRun, ModelEndpoint
from .registry import HARNESSES, UnknownHarness, get_harness

__all__ = [
    "HARNESSES",
    "Budget",
    "Harness",
    "HarnessError",
    "HarnessResult",
    "HarnessRun",
    "ModelEndpoint",
    "UnknownHarness",
    "get_harness",
]
