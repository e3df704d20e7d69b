"""Agent harnesses run as an episode's agent: one beside the container acting through the sandbox,
or one installed inside it reaching the model through a relayed port. See :mod:`.base`."""

from .base import Budget, Harness, HarnessResult, HarnessRun, ModelEndpoint

__all__ = ["Budget", "Harness", "HarnessResult", "HarnessRun", "ModelEndpoint"]
