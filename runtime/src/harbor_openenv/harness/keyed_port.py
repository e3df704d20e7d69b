"""A keyed port: an inside harness's model calls get their session key on the server's side.

An inside harness runs in the task container, where the agent can read every process's
environment and arguments, so the capture session's key must not be there. The relay's target is
this forwarder instead of the capture proxy: on 127.0.0.1 at a free port, it reads each
connection's HTTP request head, drops the ``Authorization`` (and ``Proxy-Authorization``, and
``x-api-key`` and ``x-goog-api-key``: Anthropic's and Google's key headers) the harness sent, adds
``Authorization: Bearer KEY`` and ``Connection: close``, and passes the rest through to the proxy
unchanged. ``Connection: close`` makes every connection carry one request,
so no later request on it goes by unkeyed. A head that is too long or not HTTP closes the
connection; nothing else is answered here.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from urllib.parse import urlsplit

from harbor_openenv.errors import HarborOpenEnvError

from .base import HarnessError

MAX_HEAD = 64 << 10  # the largest request head accepted (line and headers)
_CHUNK = 1 << 16
_DROPPED = re.compile(
    rb"(authorization|proxy-authorization|x-api-key|x-goog-api-key|connection|keep-alive):", re.I
)


def target_of(base_url: str) -> tuple[str, int]:
    """The host and port of a model's ``http://`` base URL, on the server's side."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        raise HarnessError(f"the model's base URL must be http://HOST[:PORT]/...: {base_url!r}")
    return parts.hostname, parts.port or 80


class HeadError(HarborOpenEnvError):
    """The bytes read are not an HTTP request head this forwarder accepts."""


def rewrite_head(head: bytes, key: str) -> bytes:
    """``head`` (request line and headers, ``\\r\\n``-separated, without the blank line) with
    its credentials and connection headers replaced by ``key`` and ``Connection: close``."""
    lines = head.split(b"\r\n")
    if not re.fullmatch(rb"[A-Z]+ \S+ HTTP/1\.[01]", lines[0]):
        raise HeadError("not an HTTP/1 request line")
    kept = [line for line in lines[1:] if not _DROPPED.match(line)]
    if any(line[:1] in (b" ", b"\t") or b":" not in line for line in kept):
        raise HeadError("a folded or malformed header")  # obsolete folding could smuggle one
    extra = [f"Authorization: Bearer {key}".encode(), b"Connection: close"]
    return b"\r\n".join([lines[0], *kept, *extra]) + b"\r\n\r\n"


class KeyedPort:
    """The forwarder for one harness run: ``with KeyedPort(target, key) as address:`` gives the
    ``(host, port)`` to relay to; closing it ends the listener and every open connection."""

    def __init__(self, target: tuple[str, int], key: str) -> None:
        self.target, self._key = target, key
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    def __enter__(self) -> tuple[str, int]:
        threading.Thread(target=self._accept, name="harbor-openenv-keyed", daemon=True).start()
        return self.address

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = [self._listener, *self._open]
            self._open.clear()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._track(client):
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                sock.close()
                return False
            self._open.add(sock)
            return True

    def _serve(self, client: socket.socket) -> None:
        upstream = None
        try:
            head, rest = _read_head(client)
            upstream = socket.create_connection(self.target, timeout=30)
            upstream.settimeout(None)
            if not self._track(upstream):
                return
            upstream.sendall(rewrite_head(head, self._key) + rest)
            back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
            back.start()
            _pump(client, upstream)
            back.join()
        except (HeadError, OSError):
            pass
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    with self._lock:
                        self._open.discard(sock)
                    sock.close()


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """The request head (without its blank line) and whatever body bytes came with it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise HeadError("the request head is too long")
        chunk = sock.recv(_CHUNK)
        if not chunk:
            raise HeadError("the connection closed before its request head ended")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    if len(head) > MAX_HEAD:
        raise HeadError("the request head is too long")
    return head, rest


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until ``source`` ends, then half-close ``sink``."""
    with contextlib.suppress(OSError):
        while chunk := source.recv(_CHUNK):
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
