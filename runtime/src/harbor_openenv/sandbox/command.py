"""What a sandbox is asked to run: one :class:`Command`, whatever runs it (the engine's exec, the
exec channel, a fake)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

# A command's standard input: bytes, or a function called once the command started (the engine
# starts it meanwhile) whose bytes are sent then; end-of-file follows either.
Stdin = bytes | Callable[[], bytes] | None


@dataclass(frozen=True)
class Command:
    """Run ``argv`` directly (no shell added) as ``user`` ("" the environment's own) in
    ``workdir`` ("" the image's), with ``env`` added to the environment's variables and ``stdin``
    then end-of-file as standard input; keep at most ``max_output`` bytes of output; past
    ``timeout_s`` (counted once the input is sent) stop waiting and answer ``timed_out``."""

    argv: Sequence[str]
    timeout_s: float
    max_output: int
    user: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = ""
    stdin: Stdin = None
