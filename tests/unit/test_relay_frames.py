"""The relay's runtime side (sandbox/relay.py) without an engine: its framing, and its loop
against a scripted helper over a socket pair, with a TCP echo server on 127.0.0.1 as the target
(the real helper and container: tests/engine/test_relay.py)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from harbor_openenv.helper import contract
from harbor_openenv.sandbox.errors import SandboxError
from harbor_openenv.sandbox.relay import Demux, Frames, Relay, RelayError, frame

READY, OPEN, DATA, CLOSE, ACK = (
    contract.RELAY_READY,
    contract.RELAY_OPEN,
    contract.RELAY_DATA,
    contract.RELAY_CLOSE,
    contract.RELAY_ACK,
)


def muxed(data: bytes, stream: int = 1) -> bytes:
    """``data`` as Docker's multiplexed exec output carries it."""
    return bytes([stream, 0, 0, 0]) + struct.pack(">I", len(data)) + data


def test_frames_parse_whatever_the_split():
    stream = frame(READY, 0, 4180) + frame(OPEN, 1, 0) + frame(DATA, 1, 3, b"abc")
    stream += frame(CLOSE, 1, 0) + frame(ACK, 1, 3)
    expected = [(READY, 0, 4180, b""), (OPEN, 1, 0, b""), (DATA, 1, 3, b"abc")]
    expected += [(CLOSE, 1, 0, b""), (ACK, 1, 3, b"")]
    for cut in range(len(stream) + 1):
        frames = Frames()
        assert [*frames.feed(stream[:cut]), *frames.feed(stream[cut:])] == expected


@pytest.mark.parametrize(
    "bad",
    [frame(9, 1, 0), frame(DATA, 1, 0), frame(DATA, 1, contract.RELAY_CHUNK + 1)],
    ids=["unknown type", "empty data", "data over a chunk"],
)
def test_frames_refuse_what_the_helper_never_sends(bad):
    with pytest.raises(RelayError):
        list(Frames().feed(bad))


def test_demux_keeps_stdout_and_the_tail_of_stderr():
    demux = Demux()
    data = muxed(b"out") + muxed(b"why", stream=2) + muxed(b"put")
    assert demux.feed(data[:5]) + demux.feed(data[5:]) == b"output"
    assert demux.stderr == b"why"
    with pytest.raises(RelayError):
        demux.feed(muxed(b"x", stream=7))


class FakeHelper:
    """The helper's end of the stream: sends muxed frames, reads the runtime's."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.frames = Frames()
        self.seen: list[tuple[int, int, int, bytes]] = []

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(muxed(b"".join(frames)))

    def expect(self, count: int, timeout: float = 10) -> list[tuple[int, int, int, bytes]]:
        deadline = time.monotonic() + timeout
        self.sock.settimeout(timeout)
        while len(self.seen) < count and time.monotonic() < deadline:
            self.seen += self.frames.feed(self.sock.recv(1 << 16))
        taken, self.seen = self.seen[:count], self.seen[count:]
        return taken


@pytest.fixture
def echo_port():
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1 << 16):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def started(target: tuple[str, int]) -> tuple[Relay, FakeHelper]:
    ours, theirs = socket.socketpair()
    helper = FakeHelper(theirs)
    relay = Relay(ours, target, read_ahead=muxed(frame(READY, 0, 4180)))
    relay.start(timeout_s=5)
    return relay, helper


def test_a_connection_is_carried_to_the_target_and_closed_both_ways(echo_port):
    relay, helper = started(("127.0.0.1", echo_port))
    try:
        helper.send(frame(OPEN, 1, 0), frame(DATA, 1, 5, b"hello"), frame(CLOSE, 1, 0))
        got = helper.expect(3)
        assert sorted(got) == [(DATA, 1, 5, b"hello"), (CLOSE, 1, 0, b""), (ACK, 1, 5, b"")]
        assert got.index((DATA, 1, 5, b"hello")) < got.index((CLOSE, 1, 0, b""))
        helper.send(frame(ACK, 1, 5))
        deadline = time.monotonic() + 5
        while relay.connections and time.monotonic() < deadline:
            time.sleep(0.01)
        assert relay.connections == 0
    finally:
        relay.close()
    assert relay.ended == "closed"


def test_a_refused_target_closes_the_connection_and_drops_its_data():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there
    relay, helper = started(("127.0.0.1", port))
    try:
        helper.send(frame(OPEN, 7, 0))
        assert helper.expect(1) == [(CLOSE, 7, 0, b"")]
        helper.send(frame(DATA, 7, 3, b"abc"))
        assert helper.expect(1) == [(ACK, 7, 3, b"")]  # dropped, yet acked
    finally:
        relay.close()


def test_a_frame_for_a_connection_never_opened_ends_the_relay(echo_port):
    relay, helper = started(("127.0.0.1", echo_port))
    helper.send(frame(DATA, 3, 1, b"x"))
    relay._thread.join(timeout=5)
    assert "connection 3, which is not open" in (relay.ended or "")
    relay.close()


def test_a_helper_that_never_listens_is_an_error_with_its_message():
    ours, theirs = socket.socketpair()
    theirs.sendall(muxed(b"cannot listen on 127.0.0.1:4180: Address in use\n", stream=2))
    theirs.close()
    relay = Relay(ours, ("127.0.0.1", 9))
    with pytest.raises(SandboxError, match=r"cannot listen on 127\.0\.0\.1:4180"):
        relay.start(timeout_s=5)
