"""The relay's throughput: the same client inside a task container sends bytes to an echo server
on the host's 127.0.0.1 and reads them back, through the relay from a network-none container,
against directly from a network-host container (the baseline), measured in one run:

    .venv/bin/python bench/relay.py [--mb 64] [--connections 8]
"""

from __future__ import annotations

import argparse
import os
import socket
import threading

import docker

from harbor_openenv.sandbox import remove_containers
from harbor_openenv.sandbox.spec import ContainerSpec
from harbor_openenv.sandbox.starter import DockerStarter

PORT = 4180  # the relayed port inside
# Inside: CONNECTIONS connections at once, each sends MB megabytes and reads them back; prints
# the seconds the whole transfer took.
CLIENT = r"""
import socket, sys, threading, time
port, count, mb = map(int, sys.argv[1:4])
block = bytes(range(256)) * 4096
def one():
    s = socket.create_connection(("127.0.0.1", port))
    def send():
        for _ in range(mb):
            s.sendall(block)
        s.shutdown(socket.SHUT_WR)
    sender = threading.Thread(target=send)
    sender.start()
    got = 0
    while chunk := s.recv(1 << 16):
        got += len(chunk)
    sender.join()
    assert got == mb * len(block), got
start = time.perf_counter()
threads = [threading.Thread(target=one) for _ in range(count)]
[t.start() for t in threads]
[t.join() for t in threads]
print(time.perf_counter() - start)
"""


def echo_server() -> int:
    listener = socket.create_server(("127.0.0.1", 0))

    def echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1 << 16):
                conn.sendall(data)

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return int(listener.getsockname()[1])


def transfer(box, port: int, connections: int, mb: int) -> float:
    result = box.exec(
        'exec python3 -c "$SCRIPT" "$@"',
        args=(str(port), str(connections), str(mb)),
        env={"SCRIPT": CLIENT},
        timeout_s=600,
        max_output=1 << 16,
    )
    assert result.exit_code == 0, result.output
    return float(result.output.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=64, help="megabytes each connection sends")
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    client = docker.from_env()
    owner = f"bench-relay-{os.getpid()}"
    backend = DockerStarter(lambda: client, owner=owner)
    port = echo_server()
    try:
        host = backend.start(ContainerSpec("python:3.12-slim", network="host"), task_id="bench")
        none = backend.start(ContainerSpec("python:3.12-slim", network="none"), task_id="bench")
        print("| transfer | direct (network host) | relay (network none) | relay / direct |")
        print("| --- | --- | --- | --- |")
        for connections, mb in ((1, args.mb), (args.connections, args.mb // args.connections)):
            direct = transfer(host, port, connections, mb)
            with none.relay(PORT, ("127.0.0.1", port)):
                relayed = transfer(none, PORT, connections, mb)
            moved = 2 * connections * mb  # each way
            print(
                f"| {connections} x {mb} MB each way | {direct:.2f} s ({moved / direct:.0f} MB/s)"
                f" | {relayed:.2f} s ({moved / relayed:.0f} MB/s) | {relayed / direct:.1f} |"
            )
    finally:
        remove_containers(client, owner=owner)


if __name__ == "__main__":
    main()
