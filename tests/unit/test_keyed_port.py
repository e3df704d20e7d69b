"""The keyed port (harness/keyed_port.py): an inside harness's requests get the session key on
the server's side; what the harness sent as credentials is dropped, each connection carries one
request, and a head that is not HTTP/1 or too long is closed unanswered."""

from __future__ import annotations

import http.server
import socket
import threading

import httpx
import pytest

from harbor_openenv.harness.keyed_port import MAX_HEAD, HeadError, KeyedPort, rewrite_head


def test_the_head_gets_the_key_and_loses_the_harness_credentials():
    head = (
        b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:4180\r\nAuthorization: Bearer stolen\r\n"
        b"proxy-authorization: x\r\nConnection: keep-alive\r\nContent-Length: 2"
    )
    assert rewrite_head(head, "k1").split(b"\r\n") == [
        b"POST /v1/responses HTTP/1.1",
        b"Host: 127.0.0.1:4180",
        b"Content-Length: 2",
        b"Authorization: Bearer k1",
        b"Connection: close",
        b"",
        b"",
    ]


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/2\r\nHost: x",  # not HTTP/1
        b"hello",
        b"GET / HTTP/1.1\r\nHost: x\r\n Authorization: Bearer folded",  # obsolete folding
        b"GET / HTTP/1.1\r\nno colon here",
    ],
)
def test_a_head_it_cannot_read_is_refused(head):
    with pytest.raises(HeadError):
        rewrite_head(head, "k1")


@pytest.fixture
def upstream():
    """An HTTP server on 127.0.0.1 that keeps the headers of each request it answers."""
    seen: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {k.lower(): v for k, v in self.headers.items()}
            seen.append({**headers, "body": body.decode(), "peer": str(self.client_address)})
            self.send_response(200)
            if self.close_connection:  # as uvicorn (h11) answers a request that says close
                self.send_header("Connection", "close")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[:2], seen
    server.shutdown()
    server.server_close()


def test_requests_reach_the_target_with_the_key_one_per_connection(upstream):
    target, seen = upstream
    port = KeyedPort(target, "session-key")
    with port, httpx.Client(base_url="http://{}:{}".format(*port.address)) as client:
        for n in range(3):
            answer = client.post("/v1/x", content=f"body{n}", headers={"Authorization": "B x"})
            assert (answer.status_code, answer.text) == (200, "ok")
    assert [s["authorization"] for s in seen] == ["Bearer session-key"] * 3
    assert [s["body"] for s in seen] == ["body0", "body1", "body2"]
    assert {s["connection"] for s in seen} == {"close"}
    assert len({s["peer"] for s in seen}) == 3  # one connection each


def test_a_head_too_long_or_not_http_is_closed_unanswered(upstream):
    target, seen = upstream
    with KeyedPort(target, "k") as address:
        for junk in (b"SSH-2.0-OpenSSH\r\n\r\n", b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD):
            with socket.create_connection(address, timeout=10) as sock:
                sock.sendall(junk)
                assert sock.recv(100) == b""
    assert seen == []


def test_closing_it_ends_the_listener():
    port = KeyedPort(("127.0.0.1", 9), "k")
    with port as address:
        pass
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=2).close()
