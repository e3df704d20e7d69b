"""What a command run in a sandbox answers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None  # None: it timed out
    output: str  # standard output and error, interleaved
    truncated: bool = False
    timed_out: bool = False
