"""What a command run in a sandbox answers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None  # None: it timed out
    output: str  # standard output and error, interleaved, as UTF-8 (invalid bytes replaced)
    truncated: bool = False
    timed_out: bool = False
    raw: bytes | None = None  # the same output's bytes as they came, where the backend kept them

    @property
    def data(self) -> bytes:
        """The output's bytes: :attr:`raw`, else :attr:`output` encoded."""
        return self.output.encode() if self.raw is None else self.raw
