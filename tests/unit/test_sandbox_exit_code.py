"""An exec's exit code when the engine records it late (a fake engine API: logic only)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, cast

from harbor_openenv.sandbox import DockerSandbox


class _LateEngine:
    """exec_inspect says Running for ``lag`` seconds after the output ended, as a loaded engine
    did in the 32-session load test (the helper's stop then read as failed)."""

    def __init__(self, lag: float, code: int) -> None:
        self.ended, self.lag, self.code = time.monotonic(), lag, code

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        running = time.monotonic() - self.ended < self.lag
        return {"Running": running, "ExitCode": None if running else self.code}


def _sandbox(engine: _LateEngine) -> DockerSandbox:
    return DockerSandbox(
        cast(Any, SimpleNamespace(api=engine)), cast(Any, SimpleNamespace(id="c0ffee"))
    )


def test_an_exit_code_recorded_a_second_late_is_still_read():
    assert _sandbox(_LateEngine(lag=1.2, code=7))._exit_code("e1") == 7


def test_an_exit_code_recorded_at_once_is_read_at_once():
    started = time.monotonic()
    assert _sandbox(_LateEngine(lag=0.0, code=0))._exit_code("e1") == 0
    assert time.monotonic() - started < 0.5
