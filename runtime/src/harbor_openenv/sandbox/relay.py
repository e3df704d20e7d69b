"""The relay: a TCP port inside a task container carried to one target on the runtime's side.

``helper relay PORT`` (``helper/relay.c``) listens on 127.0.0.1:PORT in the container's network
namespace, which has loopback even with network none, and runs as one engine exec whose standard
input and output are the only link: no bind mount, no host path, no network of the container's.
Each connection accepted there is announced (``RELAY_OPEN``) and carried as framed data
(contract.h's relay section); this side opens its own TCP connection to :attr:`Relay.target`, the
one address the runtime chose, for each. A frame names no address, so nothing in the container
can reach anything else through the relay. Flow control is per connection (``RELAY_WINDOW``
bytes in flight each way until acknowledged), so buffers stay bounded and a slow reader stalls
only its own connection.

:class:`Relay` is this side's loop, one thread over the exec's stream (Docker's multiplexed
output framing on its way out of the container) and the target connections; :class:`Frames`
parses the helper's frames.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.helper import contract

from .errors import SandboxError

# Who runs the helper's relay: neither root (a flaw in its frame parsing gives no privilege) nor,
# short of a task that picks this very uid, the agent (a non-root agent can then neither signal,
# ptrace nor read it, nor take its port once it listens). It needs no name in the image.
RELAY_USER = "65533:65533"
READY_TIMEOUT_S = 30.0  # how long the helper may take to listen
log = logging.getLogger("harbor_openenv")
_HEAD = struct.Struct(">BII")  # type, connection id, count
_READY, _OPEN, _DATA, _CLOSE, _ACK = (
    contract.RELAY_READY,
    contract.RELAY_OPEN,
    contract.RELAY_DATA,
    contract.RELAY_CLOSE,
    contract.RELAY_ACK,
)
_CHUNK, _WINDOW = contract.RELAY_CHUNK, contract.RELAY_WINDOW
_STDERR_KEEP = 1 << 12  # the helper's last stderr bytes, for an error


class RelayError(HarborOpenEnvError):
    """The helper sent a frame this side cannot accept: the relay ends."""


def frame(kind: int, ident: int, count: int, data: bytes = b"") -> bytes:
    """One frame as the helper reads it (``data`` only for ``RELAY_DATA``, ``count`` long)."""
    return _HEAD.pack(kind, ident, count) + data


class Frames:
    """The helper's frames out of its standard output, fed as it arrives."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[int, int, int, bytes]]:
        """The frames that ``data`` completes: (type, id, count, data)."""
        self._buffer += data
        while len(self._buffer) >= _HEAD.size:
            kind, ident, count = _HEAD.unpack_from(self._buffer)
            if kind not in (_READY, _OPEN, _DATA, _CLOSE, _ACK):
                raise RelayError(f"an unknown frame type {kind}")
            size = count if kind == _DATA else 0
            if kind == _DATA and not 0 < count <= _CHUNK:
                raise RelayError(f"a data frame of {count} bytes")
            if len(self._buffer) < _HEAD.size + size:
                return
            payload = bytes(self._buffer[_HEAD.size : _HEAD.size + size])
            del self._buffer[: _HEAD.size + size]
            yield kind, ident, count, payload


class Demux:
    """Docker's multiplexed exec output (8-byte headers: stream, size): stdout and stderr."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.stderr = b""  # the last bytes of standard error

    def feed(self, data: bytes) -> bytes:
        """The standard output that ``data`` completes; standard error is kept aside."""
        self._buffer += data
        stdout = bytearray()
        while len(self._buffer) >= 8:
            kind, size = self._buffer[0], struct.unpack_from(">I", self._buffer, 4)[0]
            if len(self._buffer) < 8 + size:
                break
            payload = bytes(self._buffer[8 : 8 + size])
            del self._buffer[: 8 + size]
            if kind == 1:
                stdout += payload
            elif kind == 2:
                self.stderr = (self.stderr + payload)[-_STDERR_KEEP:]
            else:
                raise RelayError(f"an unexpected stream frame (type {kind})")
        return bytes(stdout)


@dataclass(eq=False)
class _Connection:
    """One relayed connection, on this side: its socket to the target."""

    ident: int
    sock: socket.socket
    connecting: bool = True
    pending: bytearray = field(default_factory=bytearray)  # the helper's data for the target
    in_flight: int = 0  # our data the helper has not acknowledged
    read_done: bool = False  # we sent RELAY_CLOSE
    peer_done: bool = False  # the helper sent RELAY_CLOSE
    broken: bool = False  # the target failed: the helper's data is dropped (and acked)
    shut: bool = False


class Relay:
    """This side of one ``helper relay``: ``stream`` is the exec's socket (its first bytes
    ``read_ahead``), each connection goes to ``target``. :meth:`start` waits until the helper
    listens; :meth:`close` ends everything (the helper sees end-of-file and exits)."""

    def __init__(
        self, stream: socket.socket, target: tuple[str, int], read_ahead: bytes = b""
    ) -> None:
        self.target = target
        self._stream = stream
        self._read_ahead = read_ahead
        self._address = _resolve(target)
        self._demux, self._frames = Demux(), Frames()
        self._out = bytearray()  # frames for the helper
        self._connections: dict[int, _Connection] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._ready = threading.Event()
        self._closing = False
        self.ended: str | None = None  # why the loop ended, once it has
        self._thread = threading.Thread(target=self._loop, name="harbor-openenv-relay", daemon=True)

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._connections)

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Run the loop; return once the helper listens, else raise :class:`SandboxError`."""
        self._stream.setblocking(False)
        self._thread.start()
        if not self._ready.wait(timeout_s) or self.ended is not None:
            self.close()
            problem = self._demux.stderr.decode(errors="replace").strip() or self.ended
            raise SandboxError(f"the relay did not start: {problem or 'no answer in time'}")

    def close(self) -> None:
        """End the loop, every relayed connection and the helper (idempotent)."""
        self._closing = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        with contextlib.suppress(OSError):
            self._wake_w.close()

    # -- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            self._selector.register(self._wake_r, selectors.EVENT_READ)
            self._selector.register(self._stream, selectors.EVENT_READ)
            if self._read_ahead:
                self._take(self._read_ahead)
            while not self._closing:
                self._interest()
                for key, events in self._selector.select():
                    if key.fileobj is self._wake_r:
                        continue
                    if key.fileobj is self._stream:
                        self._stream_ready(events)
                    else:
                        self._target_ready(key.data, events)
        except (OSError, RelayError) as exc:
            self.ended = str(exc) or type(exc).__name__
        finally:
            if self.ended is None:
                self.ended = "closed" if self._closing else "the helper's stream ended"
            if not self._closing:
                log.warning("relay to %s:%d ended: %s", *self.target, self.ended)
            self._ready.set()
            self._shutdown()

    def _shutdown(self) -> None:
        for connection in self._connections.values():
            connection.sock.close()
        self._connections.clear()
        for sock in (self._stream, self._wake_r):
            with contextlib.suppress(OSError):
                sock.close()
        self._selector.close()

    def _interest(self) -> None:
        """Register what each socket waits for now."""
        backlog = len(self._out) < 4 * (_HEAD.size + _CHUNK)
        stream = selectors.EVENT_READ | (selectors.EVENT_WRITE if self._out else 0)
        self._selector.modify(self._stream, stream)
        for connection in self._connections.values():
            events = 0
            if connection.connecting or connection.pending:
                events |= selectors.EVENT_WRITE
            if (
                not connection.connecting
                and not connection.read_done
                and connection.in_flight < _WINDOW
                and backlog
            ):
                events |= selectors.EVENT_READ
            registered = self._selector.get_map().get(connection.sock)
            if registered is None and events:
                self._selector.register(connection.sock, events, connection)
            elif registered is not None and not events:
                self._selector.unregister(connection.sock)
            elif registered is not None and registered.events != events:
                self._selector.modify(connection.sock, events, connection)

    def _stream_ready(self, events: int) -> None:
        if events & selectors.EVENT_WRITE and self._out:
            try:
                sent = self._stream.send(self._out)
            except BlockingIOError:
                sent = 0
            del self._out[:sent]
        if events & selectors.EVENT_READ:
            try:
                data = self._stream.recv(1 << 18)
            except BlockingIOError:
                return
            if not data:
                raise OSError("the helper's stream ended")
            self._take(data)

    def _take(self, data: bytes) -> None:
        for kind, ident, count, payload in self._frames.feed(self._demux.feed(data)):
            if kind == _READY:
                self._ready.set()
            elif kind == _OPEN:
                self._open(ident)
            else:
                self._peer(kind, ident, count, payload)

    def _open(self, ident: int) -> None:
        if ident in self._connections:
            raise RelayError(f"connection {ident} opened twice")
        sock = socket.socket(self._address[0], socket.SOCK_STREAM)
        sock.setblocking(False)
        connection = _Connection(ident, sock)
        self._connections[ident] = connection
        code = sock.connect_ex(self._address[1])
        if code not in (0, errno.EINPROGRESS):
            self._fail(connection)

    def _peer(self, kind: int, ident: int, count: int, payload: bytes) -> None:
        connection = self._connections.get(ident)
        if connection is None:
            if kind == _ACK:
                return  # a late ack of a connection that ended
            raise RelayError(f"a frame for connection {ident}, which is not open")
        if kind == _ACK:
            if count > connection.in_flight:
                raise RelayError(f"connection {ident} acked more than was sent")
            connection.in_flight -= count
        elif kind == _DATA:
            if connection.peer_done or len(connection.pending) + count > _WINDOW:
                raise RelayError(f"connection {ident} sent past its window or its end")
            if connection.broken:
                self._out += frame(_ACK, ident, count)
            else:
                connection.pending += payload
        elif kind == _CLOSE:
            connection.peer_done = True
        self._settle(connection)

    def _target_ready(self, connection: _Connection, events: int) -> None:
        if connection.connecting:
            code = connection.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            connection.connecting = False
            if code:
                self._fail(connection)
                return
        if events & selectors.EVENT_WRITE and connection.pending:
            try:
                sent = connection.sock.send(connection.pending)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._fail(connection)
                return
            del connection.pending[:sent]
            if sent:
                self._out += frame(_ACK, connection.ident, sent)
        if events & selectors.EVENT_READ and not connection.read_done:
            room = min(_CHUNK, _WINDOW - connection.in_flight)
            try:
                data = connection.sock.recv(room)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                self._out += frame(_DATA, connection.ident, len(data), data)
                connection.in_flight += len(data)
            else:
                self._end_reading(connection)
        self._settle(connection)

    def _fail(self, connection: _Connection) -> None:
        """The target refused or broke: drop what was pending and end the helper's client."""
        connection.connecting = False
        if connection.pending:
            self._out += frame(_ACK, connection.ident, len(connection.pending))
            connection.pending.clear()
        connection.broken = True
        self._end_reading(connection)
        self._settle(connection)

    def _end_reading(self, connection: _Connection) -> None:
        if not connection.read_done:
            self._out += frame(_CLOSE, connection.ident, 0)
            connection.read_done = True

    def _settle(self, connection: _Connection) -> None:
        """Half-close the target once the helper's side ended and its data went out; forget the
        connection once both sides ended."""
        if connection.connecting:
            return
        ended = connection.peer_done and not connection.pending and not connection.broken
        if ended and not connection.shut:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_WR)
            connection.shut = True
        if connection.read_done and connection.peer_done and not connection.pending:
            if self._selector.get_map().get(connection.sock) is not None:
                self._selector.unregister(connection.sock)
            connection.sock.close()
            del self._connections[connection.ident]


def _resolve(target: tuple[str, int]) -> tuple[socket.AddressFamily, tuple[str, int]]:
    """The target's address (its first), resolved once: every connection goes there."""
    try:
        found = socket.getaddrinfo(*target, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise SandboxError(f"cannot resolve the relay's target {target[0]}: {exc}") from None
    family, _, _, _, address = found[0]
    return family, (str(address[0]), int(address[1]))
