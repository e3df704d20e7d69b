"""The exec channel: one long-lived engine exec per episode that runs the agent's commands.

An engine exec costs one exec instance (create, start, inspect: three API calls and a shim's
work) per command, which is most of an agent step's time. The channel pays that once: the
runtime's static helper (``helper serve``, see ``helper/serve.c``) runs as one attached exec,
and each command is a request written to its standard input and an answer read from its output.

Why the helper and not a shell loop: a POSIX ``sh`` reader cannot frame binary standard input (a
write's content), and a static binary needs nothing from the image (busybox, alpine and images
without a shell alike). It runs as the agent's user, never root unless the agent is root, so it
holds no privilege the agent lacks.

Trust: the channel is inside the agent's reach (the agent's user can kill it; a root agent can
replace what answers). Everything it returns is agent-controlled, so it carries only the agent's
own actions, never the orchestrator's (prepare, stop, the verifier, reward reads, solve), and an
answer is checked strictly: a bad magic, flags or size, a nonce other than its request's (an
answer the agent wrote into the helper's output pipe, which it can open through ``/proc``, or the
real answer that such a forgery left behind), bytes after the answer, end-of-file or no answer
within the command's timeout plus :data:`GRACE_S` raises :class:`ChannelError`, after which the
sandbox uses the engine for the rest of the episode (:mod:`.base`). The command whose answer
failed runs again through the engine: it may have run, in part, twice (only an agent that
attacks its own channel gets that). A root agent that reads the helper's memory could learn a
nonce and forge one answer: that answer is the agent's own output, which it controls anyway.
"""

from __future__ import annotations

import logging
import secrets
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.helper import contract

from . import stream
from .command import Command
from .errors import SandboxError
from .result import ExecResult

GRACE_S = 5.0  # past a command's timeout: the helper's EXIT_GRACE_MS for output, and the wire
MAX_REQUEST = contract.MAX_REQUEST  # the helper's limits (contract.h)
MAX_OUTPUT = contract.MAX_OUTPUT
MAX_STDERR = 1 << 16  # the helper writes nothing there; more than this is misbehaviour
log = logging.getLogger("harbor_openenv")
_MAGIC = contract.ANSWER_MAGIC.encode()
_ANSWER = struct.Struct(">4s8sBiI")  # magic, nonce, flags, exit code, output length
_TIMED_OUT, _TRUNCATED, _EXITED = (
    contract.ANSWER_TIMED_OUT,
    contract.ANSWER_TRUNCATED,
    contract.ANSWER_EXITED,
)


class ChannelError(HarborOpenEnvError):
    """The channel died or misbehaved: the step falls back to the engine."""


class ChannelBusy(HarborOpenEnvError):
    """Another command holds the channel, or this one cannot cross it (too big, a NUL byte):
    that command goes through the engine instead."""


def request(command: Command, nonce: bytes = bytes(8)) -> bytes:
    """One request frame for ``command`` (its ``stdin`` bytes or None; its ``user`` is the
    channel's), as ``helper serve`` reads it; its answer carries ``nonce``."""
    argv, env, max_output, stdin = command.argv, command.env, command.max_output, command.stdin
    if callable(stdin):
        raise ChannelBusy("input sent once the command started cannot cross the channel")
    strings = [command.workdir, *argv, *(f"{key}={value}" for key, value in env.items())]
    encoded = [text.encode() for text in strings]
    if any(b"\x00" in item for item in encoded) or any("=" in key for key in env):
        raise ChannelBusy("a NUL byte or a '=' in a name cannot cross the channel")
    if max_output > MAX_OUTPUT:
        raise ChannelBusy(f"an output cap over {MAX_OUTPUT} bytes")
    timeout_ms = min(max(0, round(command.timeout_s * 1000)), 0xFFFFFFFF)
    head = nonce + struct.pack(">IIII", timeout_ms, max_output, len(argv), len(env))
    body = b"".join([head, *(struct.pack(">I", len(item)) + item for item in encoded)])
    body += stdin or b""
    if len(body) > MAX_REQUEST:
        raise ChannelBusy(f"a request over {MAX_REQUEST} bytes")
    return struct.pack(">I", len(body)) + body


class Channel:
    """``helper serve`` running as ``user`` in one container, over the engine's attached exec."""

    def __init__(self, sock: Any, user: str) -> None:
        self.user = user
        self._sock = sock  # docker-py's wrapper; closing it ends the exec's stream
        self._raw = stream.raw_socket(sock)
        self._buffer = bytearray()  # multiplexed stream bytes not yet framed
        self._stdout = bytearray()  # framed standard output not yet parsed
        self._stderr = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        stream.close(self._sock)

    def run(self, command: Command) -> ExecResult:
        """Run one command; raises :class:`ChannelBusy` while another runs, and
        :class:`ChannelError` when the channel fails (it is then of no further use)."""
        nonce = secrets.token_bytes(8)
        frame = request(
            command,
            nonce=nonce,
        )  # raises ChannelBusy for what cannot cross
        if not self._lock.acquire(blocking=False):
            raise ChannelBusy
        try:
            try:
                self._raw.sendall(frame)
            except OSError as exc:
                raise ChannelError(f"cannot send: {exc}") from None
            deadline = time.monotonic() + command.timeout_s + GRACE_S
            return self._answer(nonce, command.max_output, deadline)
        finally:
            self._lock.release()

    def _answer(self, nonce: bytes, max_output: int, deadline: float) -> ExecResult:
        self._need(_ANSWER.size, deadline)
        magic, echoed, flags, code, size = _ANSWER.unpack_from(self._stdout)
        if (
            magic != _MAGIC
            or echoed != nonce
            or flags & ~(_TIMED_OUT | _TRUNCATED | _EXITED)
            or size > max_output
        ):
            raise ChannelError("a malformed answer")
        if bool(flags & _TIMED_OUT) == bool(flags & _EXITED):
            raise ChannelError("an answer both timed out and exited, or neither")
        self._need(_ANSWER.size + size, deadline)
        output = bytes(self._stdout[_ANSWER.size : _ANSWER.size + size])
        del self._stdout[: _ANSWER.size + size]
        if self._stdout:
            raise ChannelError("bytes after the answer")
        return ExecResult(
            code if flags & _EXITED else None,
            output.decode("utf-8", errors="replace"),
            truncated=bool(flags & _TRUNCATED),
            timed_out=bool(flags & _TIMED_OUT),
            raw=output,
        )

    def _need(self, count: int, deadline: float) -> None:
        """Read the engine's multiplexed stream until ``count`` bytes of stdout are framed."""
        while len(self._stdout) < count:
            while len(self._buffer) >= 8 and len(self._stdout) < count:
                kind, size = self._buffer[0], struct.unpack_from(">I", self._buffer, 4)[0]
                if len(self._buffer) < 8 + size:
                    break
                payload = self._buffer[8 : 8 + size]
                del self._buffer[: 8 + size]
                if kind == 1:
                    self._stdout += payload
                elif kind == 2 and self._stderr + size <= MAX_STDERR:
                    self._stderr += size
                else:
                    raise ChannelError(f"an unexpected stream frame (type {kind})")
            if len(self._stdout) >= count:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not stream.wait_readable(self._raw, remaining):
                raise ChannelError("no answer in time")
            try:
                data = self._raw.recv(1 << 16)
            except OSError as exc:
                raise ChannelError(f"cannot read: {exc}") from None
            if not data:
                raise ChannelError("the channel ended")
            self._buffer += data


Opener = Callable[[str], Channel | None]  # a backend's new channel as a user (None: it has none)


class ChannelSlot:
    """A sandbox's channel: opened by the agent's first command (after the process baseline, so
    the helper's stop kills it), closed before the orchestrator acts, reopened by the agent's
    next command, and off for the rest of the episode once it failed (:attr:`failed` says why)."""

    def __init__(self, opener: Opener) -> None:
        self._open = opener
        self._channel: Channel | None = None
        self._lock = threading.Lock()
        self.failed: str | None = None

    def run(self, command: Command) -> ExecResult | None:
        """Run through the channel as the command's user; None: use the engine (no channel,
        busy, failed)."""
        channel = self._get(command.user)
        if channel is None:
            return None
        try:
            return channel.run(command)
        except ChannelBusy:
            return None
        except ChannelError as exc:
            self.fail(str(exc))
            return None

    def fail(self, why: str) -> None:
        """Turn the channel off for good."""
        with self._lock:
            if self.failed is None:
                log.warning("exec channel off for the rest of the episode: %s", why)
            self.failed = self.failed or why
        self.close()

    def close(self) -> None:
        """End the open channel, if any (the agent's next command opens another)."""
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def _get(self, user: str) -> Channel | None:
        with self._lock:
            if self.failed is not None:
                return None
            if self._channel is not None and self._channel.user == user:
                return self._channel
            old, self._channel = self._channel, None
        if old is not None:
            old.close()
        try:
            channel = self._open(user)
        except SandboxError as exc:
            self.fail(str(exc))
            return None
        with self._lock:
            if channel is None or self.failed is not None:
                self.failed = self.failed or "this backend has no channel"
            else:
                self._channel = channel
                return channel
        if channel is not None:
            channel.close()
        return None
