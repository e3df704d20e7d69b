"""The socket of an attached exec or attach, whatever carries it: this host's unix socket, TCP with
TLS (an ``ssl.SSLSocket``) or SSH (a paramiko channel). docker-py hands out the object below its
HTTP response; these read it with a deadline and end what is sent without ending what is read."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from typing import Any, cast


def raw_socket(sock: object) -> socket.socket:
    """The socket below docker-py's wrapper (a unix socket's ``SocketIO``), else ``sock``."""
    return cast(socket.socket, getattr(sock, "_sock", sock))


def wait_readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` has bytes to read within ``timeout`` seconds. TLS decrypts a whole record
    at a time: bytes already decrypted (``pending``) are never signalled by the socket."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    poller = select.poll()  # not select(): a server's descriptors go past FD_SETSIZE (1024)
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(timeout, 0) * 1000))


def close(sock: object) -> None:
    """Close docker-py's socket and the one below it: closing its wrapper (a ``SocketIO``) alone
    leaves the descriptor open until the garbage collector finds the HTTP response holding it."""
    for each in (sock, raw_socket(sock)):
        with contextlib.suppress(OSError):
            cast(Any, each).close()


def close_write(sock: socket.socket) -> None:
    """End what is sent (the command's standard input), keep reading. ``SSLSocket.shutdown``
    would drop TLS for both directions, so TLS half-closes the TCP connection below it (the engine
    reads the end of its input there); a paramiko channel sends its EOF."""
    if isinstance(sock, ssl.SSLSocket):
        socket.socket.shutdown(sock, socket.SHUT_WR)
    else:
        sock.shutdown(socket.SHUT_WR)


def read_ahead(sock: object, raw: socket.socket) -> bytes:
    """The stream bytes the HTTP client read along with the response headers.

    docker-py hands out the socket below the response's buffered reader, so output that arrived
    in the same read as the headers sits in that buffer and is lost to a reader of the socket
    (docker-py issue 3332: empty output under load). A non-blocking read1 returns what the buffer
    holds, or what the socket has, without waiting.
    """
    response: Any = getattr(sock, "_response", None)
    reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    if reader is None or not hasattr(reader, "read1"):
        return b""
    timeout = raw.gettimeout()
    raw.settimeout(0.0)
    try:
        return cast(bytes, reader.read1(1 << 16) or b"")
    except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
        return b""
    finally:
        raw.settimeout(timeout)


def frames(sock: socket.socket, deadline: float, buffer: bytes = b"") -> Iterator[bytes]:
    """Payloads of Docker's multiplexed exec stream (``buffer``: bytes already read from it),
    raising TimeoutError past ``deadline``."""
    while True:
        while len(buffer) >= 8:
            size = struct.unpack(">I", buffer[4:8])[0]
            if len(buffer) < 8 + size:
                break
            yield buffer[8 : 8 + size]
            buffer = buffer[8 + size :]
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not wait_readable(sock, remaining):
            raise TimeoutError
        data = sock.recv(1 << 16)
        if not data:
            return
        buffer += data
