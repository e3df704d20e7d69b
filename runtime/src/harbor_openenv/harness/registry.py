"""The harnesses a rollout can name, by name: each entry a factory, imported on first use (a
harness's own library is heavy). An inside harness is one more entry."""

from __future__ import annotations

from collections.abc import Callable

from harbor_openenv.harness.base import Harness


def _mini_swe_agent() -> Harness:
    from harbor_openenv.harness.mini_swe import MiniSweAgent

    return MiniSweAgent()


HARNESSES: dict[str, Callable[[], Harness]] = {"mini-swe-agent": _mini_swe_agent}


class UnknownHarness(Exception):
    """A rollout named a harness this server does not have."""


def get_harness(name: str) -> Harness:
    """The harness called ``name``."""
    factory = HARNESSES.get(name)
    if factory is None:
        known = ", ".join(sorted(HARNESSES))
        raise UnknownHarness(f"no harness {name!r} on this server (it has: {known})")
    return factory()
