"""The relay (``Sandbox.relay``, ``helper relay``) against a real container with network none: a
server on the host's 127.0.0.1 is reached through the relayed port and nothing else is; many
concurrent connections carry megabytes byte for byte; closing the context, or the container's
death, ends everything."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from _server import wait_until

from harbor_openenv.sandbox import SandboxError, remove_containers
from harbor_openenv.sandbox.spec import ContainerSpec
from harbor_openenv.sandbox.starter import DockerStarter

pytestmark = pytest.mark.docker

PORT = 4180  # the relayed port inside the container
RELAYS = r"""
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' 2>/dev/null < $p/cmdline)" in
    '/.harbor-openenv/helper relay '*) echo "${p#/proc/} $(awk '/^Uid:/ {print $2}' $p/status)";;
  esac
done
"""
# Inside: N connections at once, each sends SIZE bytes of its own pattern, half-closes and reads
# the echo to its end; prints one line per connection: index, bytes back, whether they match.
ECHO_CLIENT = r"""
import socket, sys, threading
port, count, size = map(int, sys.argv[1:4])
results = [None] * count
def one(i):
    data = (bytes([i]) + bytes(range(256))) * (size // 257 + 1)
    data = data[:size]
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    sender = threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR)))
    sender.start()
    back = bytearray()
    while chunk := s.recv(1 << 16):
        back += chunk
    sender.join()
    s.close()
    results[i] = (len(back), bytes(back) == data)
threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
[t.start() for t in threads]
[t.join() for t in threads]
for i, (n, same) in enumerate(results):
    print(i, n, same)
"""
CONNECT = r"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("connected")
except OSError as exc:
    print("refused", exc.errno)
"""


@pytest.fixture(scope="module")
def box(docker_client):
    """A task container as a no-network task gets one (python:3.12-slim, network none)."""
    owner = f"test-relay-{os.getpid()}"
    backend = DockerStarter(lambda: docker_client, owner=owner)
    sandbox = backend.start(
        ContainerSpec("python:3.12-slim", workdir="/work", network="none"), task_id="relay"
    )
    yield sandbox
    sandbox.remove()
    remove_containers(docker_client, owner=owner)


class EchoServer:
    """A TCP server on the host's 127.0.0.1 that echoes each connection until its end."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = 0
        self.accepted = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with self._lock:
            self.open += 1
            self.accepted += 1
        try:
            while data := conn.recv(1 << 16):
                conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()
            with self._lock:
                self.open -= 1

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


def python(box, script: str, *args: str, timeout_s: float = 120):
    result = box.exec(
        'exec python3 -c "$SCRIPT" "$@"',
        args=args,
        env={"SCRIPT": script},
        timeout_s=timeout_s,
        max_output=1 << 20,
        user="nobody",
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_a_no_network_container_reaches_a_host_http_server_only_through_the_relay(box):
    import http.server

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            answer = b"you said: " + body
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host_port = server.server_address[1]
    fetch = (
        "import sys, urllib.request;"
        "print(urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=b'hello'),"
        " timeout=30).read().decode())"
    )
    try:
        with box.relay(PORT, ("127.0.0.1", host_port)):
            said = python(box, fetch, f"http://127.0.0.1:{PORT}/v1/x")
            # the host's own loopback is another namespace's: its port is not here
            direct = python(box, CONNECT, "127.0.0.1", str(host_port))
            ((_, uid),) = [line.split() for line in box.exec_root(RELAYS).output.splitlines()]
            # no route but loopback: network none stays network none while the relay runs
            routes = box.exec_root("cat /proc/net/route").output.splitlines()
            devices = box.exec_root("tail -n +3 /proc/net/dev").output.splitlines()
    finally:
        server.shutdown()
    assert said == "you said: hello\n"
    assert direct.startswith("refused")
    assert uid == "65533"  # neither root nor the agent (nobody, 65534)
    assert len(routes) == 1  # the header alone
    assert [line.split(":")[0].strip() for line in devices] == ["lo"]


def test_many_concurrent_connections_carry_megabytes_byte_for_byte(box, echo):
    count, size = 24, 1_500_000
    started = time.monotonic()
    with box.relay(PORT, ("127.0.0.1", echo.port)):
        printed = python(box, ECHO_CLIENT, str(PORT), str(count), str(size), timeout_s=300)
    seconds = time.monotonic() - started
    rows = [line.split() for line in printed.splitlines()]
    assert rows == [[str(i), str(size), "True"] for i in range(count)]
    assert echo.accepted == count
    assert wait_until(lambda: echo.open == 0, timeout=10)
    print(f"relay: {count} x {size} bytes each way in {seconds:.1f} s")


def test_closing_the_context_stops_the_listener_and_its_connections(box, echo):
    holder = (
        "import socket, sys, time; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])));"
        " s.sendall(b'x'); s.recv(1); print('held', flush=True); time.sleep(60)"
    )
    with box.relay(PORT, ("127.0.0.1", echo.port)):
        # a connection left open inside while the context closes
        box.exec(
            'python3 -c "$SCRIPT" "$@" > /tmp/held 2>&1 &',
            args=(str(PORT),),
            env={"SCRIPT": holder},
            timeout_s=30,
            max_output=1000,
        )
        assert wait_until(lambda: echo.open == 1, timeout=20)
    assert wait_until(lambda: echo.open == 0, timeout=10)  # the target's side was closed
    assert box.exec_root(RELAYS).output == ""  # the helper exited
    assert python(box, CONNECT, "127.0.0.1", str(PORT)).startswith("refused")


def test_a_port_taken_inside_is_an_error(box, echo):
    taken = pytest.raises(SandboxError, match=f"cannot listen on 127.0.0.1:{PORT}")
    with box.relay(PORT, ("127.0.0.1", echo.port)), taken, box.relay(PORT, ("127.0.0.1", 1)):
        pass


def test_the_containers_death_ends_the_relay(docker_client, echo):
    owner = f"test-relay-death-{os.getpid()}"
    backend = DockerStarter(lambda: docker_client, owner=owner)
    doomed = backend.start(ContainerSpec("python:3.12-slim", network="none"), task_id="relay")
    try:
        holder = (
            f"import socket; s = socket.create_connection(('127.0.0.1', {PORT})); s.sendall(b'x');"
            " s.recv(1); import time; time.sleep(120)"
        )
        with doomed.relay(PORT, ("127.0.0.1", echo.port)):
            doomed.exec(
                'python3 -c "$SCRIPT" > /dev/null 2>&1 &',
                env={"SCRIPT": holder},
                timeout_s=30,
                max_output=1000,
            )
            assert wait_until(lambda: echo.open == 1, timeout=20)
            doomed.container.kill()
            assert wait_until(lambda: echo.open == 0, timeout=20)
    finally:
        doomed.remove()
        remove_containers(docker_client, owner=owner)
