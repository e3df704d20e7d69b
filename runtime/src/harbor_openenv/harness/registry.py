"""The harnesses a rollout can name, by name: each entry a factory, imported on first use (a
harness's own library is heavy). An inside harness is one more entry."""

from __future__ import annotations

from collections.abc import Callable

from harbor_openenv.config import Settings
from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.harness.base import Harness


def _mini_swe_agent(settings: Settings) -> Harness:
    from harbor_openenv.harness.mini_swe import MiniSweAgent

    return MiniSweAgent()


def _codex(settings: Settings) -> Harness:
    from harbor_openenv.harness.codex import Codex

    return Codex.from_settings(settings)


def _terminus_2(settings: Settings) -> Harness:
    from harbor_openenv.harness.terminus import Terminus

    return Terminus.from_settings(settings)


def _cached(name: str) -> Callable[[Settings], Harness]:
    """The factory of the harness cache's ``name``."""

    def factory(settings: Settings) -> Harness:
        from harbor_openenv.harness import cached

        return cached.from_settings(name, settings)

    return factory


HARNESSES: dict[str, Callable[[Settings], Harness]] = {
    "mini-swe-agent": _mini_swe_agent,  # beside the container
    "codex": _codex,  # inside it, through the relay
    "terminus-2": _terminus_2,  # beside it, driving tmux in it (Python >= 3.12, harbor extra)
    # inside it, from the harness cache (HARBOR_OPENENV_HARNESS_CACHE)
    "claude-code": _cached("claude-code"),
    "gemini-cli": _cached("gemini-cli"),
    "qwen-code": _cached("qwen-code"),
    "opencode": _cached("opencode"),
    "pi": _cached("pi"),
    "aider": _cached("aider"),
}


class UnknownHarness(HarborOpenEnvError):
    """A rollout named a harness this server does not have."""


def get_harness(name: str, settings: Settings) -> Harness:
    """The harness called ``name``, as the server's ``settings`` configure it."""
    factory = HARNESSES.get(name)
    if factory is None:
        known = ", ".join(sorted(HARNESSES))
        raise UnknownHarness(f"no harness {name!r} on this server (it has: {known})")
    return factory(settings)
