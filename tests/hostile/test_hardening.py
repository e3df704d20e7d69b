"""A hostile agent against a real server: planted rewards, path races, bombs, bad requests, faults.

Each test prints its figures (run with ``-s`` to see them); the docs' security model
(docs/design/security.md, Reliability) quotes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from _server import FIXTURE_TASKS, Server, runtime_containers, wait_until
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from harbor_openenv.config import Settings

pytestmark = pytest.mark.docker

PIDS_LIMIT = Settings().pids_limit  # the suite runs at the server's defaults
# A verifier that takes two seconds before writing reward 0: a planter that survived the stop
# would have that long to leave a reward.json, which wins over reward.txt.
SLOW_TEST_SH = "#!/bin/bash\nsleep 2\necho 0 > /logs/verifier/reward.txt\n"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile") / "tasks"
    for name in ("edit-file", "limits"):
        shutil.copytree(FIXTURE_TASKS / name, root / name)
    shutil.copytree(FIXTURE_TASKS / "edit-file", root / "slow-check")
    (root / "slow-check" / "tests" / "test.sh").write_text(SLOW_TEST_SH)
    # The same task for an unprivileged agent, and one with the limits for bombs.
    shutil.copytree(root / "slow-check", root / "slow-check-nobody")
    with (root / "slow-check-nobody" / "environment" / "Dockerfile").open("a") as dockerfile:
        dockerfile.write("RUN chmod 777 /work\n")
    toml = root / "slow-check-nobody" / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\n", '[agent]\nuser = "nobody"\n'))
    shutil.copytree(root / "slow-check", root / "bomb")
    with (root / "bomb" / "task.toml").open("a") as bomb:  # its last table is [environment]
        bomb.write("cpus = 1\nmemory_mb = 512\n")
    return root


@pytest.fixture(scope="module")
def hostile(docker_client, tasks):
    srv = Server(tasks, HARBOR_OPENENV_MAX_SESSIONS="8")
    yield srv
    srv.stop()


def _ws_url(srv: Server) -> str:
    return srv.url.replace("http", "ws") + "/ws"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _container_of(docker_client, srv: Server, task: str):
    (found,) = [
        c
        for c in runtime_containers(docker_client, srv.owner_prefix)
        if c["Labels"]["harbor-openenv.task"] == task
    ]
    return docker_client.containers.get(found["Id"])


# -- planted rewards -------------------------------------------------------------------------------

PLANT = (
    "while :; do echo 1 > /logs/verifier/reward.txt;"
    " echo '{\"reward\": 1}' > /logs/verifier/reward.json; sleep 0.05; done"
)
PLANTERS = {
    "reward.json only": (
        "while :; do echo '{\"reward\": 1}' > /logs/verifier/reward.json; sleep 0.05; done",
        "nohup bash plant.sh >/dev/null 2>&1 &",
    ),
    "sleeps, then writes": (
        "while :; do sleep 1; " + PLANT.removeprefix("while :; do "),
        "nohup bash plant.sh >/dev/null 2>&1 &",
    ),
    "another user": (
        PLANT,
        "setpriv --reuid 4242 --regid 4242 --clear-groups bash plant.sh >/dev/null 2>&1 &",
    ),
    "setsid double fork": (PLANT, "setsid bash -c '(bash plant.sh &) &' >/dev/null 2>&1"),
    "respawning supervisor": (
        PLANT,
        "nohup bash -c 'while :; do bash plant.sh & wait; done' >/dev/null 2>&1 &",
    ),
}


@pytest.mark.parametrize(
    ("variant", "task"),
    [(variant, "slow-check") for variant in PLANTERS]
    + [(variant, "slow-check-nobody") for variant in PLANTERS if variant != "another user"],
)
def test_planted_reward_never_reaches_the_score(hostile, variant, task):
    script, start = PLANTERS[variant]
    with hostile.client() as env:
        env.reset(task_id=task)
        env.write("plant.sh", script + "\n")
        assert env.exec("chmod 755 plant.sh && " + start).observation.exit_code == 0
        seen = env.exec("sleep 1.5; grep -l plant.sh /proc/[0-9]*/cmdline")
        assert "/proc/" in seen.observation.output, seen.observation  # the planter runs
        result = env.evaluate()
        print(f"{variant} ({task}): planter running before evaluate, reward {result.reward}")
        assert (result.reward, result.observation.error) == (0.0, None), result.observation


# -- path races ------------------------------------------------------------------------------------

# Swaps the names d (a folder inside the workdir) and ll (a symlink to /outside) atomically,
# forever, with renameat2(RENAME_EXCHANGE): the name d is never missing, only ever one or the other.
SWAPPER = (
    "import ctypes\nlibc = ctypes.CDLL(None)\n"
    "while True:\n    libc.renameat2(-100, b'd', -100, b'll', 2)\n"
)


def test_read_write_list_race_a_folder_swapped_for_a_symlink(hostile):
    with hostile.client() as env:
        env.reset(task_id="edit-file")
        setup = (
            "mkdir -p /outside d && echo OUTSIDE > /outside/secret && echo inside > d/secret"
            " && touch /outside/outside-only && ln -s /outside ll"
        )
        assert env.exec(setup).observation.exit_code == 0
        env.write("swap.py", SWAPPER)
        assert env.exec("nohup python3 swap.py >/dev/null 2>&1 &").observation.exit_code == 0
        counts = {"write ok": 0, "read inside": 0, "list inside": 0, "refused": 0}
        for i in range(40):
            for result, kind in (
                (env.write(f"d/planted{i}", "x"), "write ok"),
                (env.read("d/secret"), "read inside"),
                (env.list("d"), "list inside"),
            ):
                if result.observation.error:
                    counts["refused"] += 1
                    continue
                assert "OUTSIDE" not in result.observation.output
                assert "outside-only" not in result.observation.output
                counts[kind] += 1
        listing = env.exec("ls /outside").observation
        outside = listing.output.split()
        print(listing)
        print(f"race: {counts}, /outside holds {outside}")
        assert outside == ["outside-only", "secret"], "a write landed outside the workdir"
        # Both outcomes happened, so the swap really raced the actions.
        assert counts["refused"] > 0 and counts["read inside"] + counts["write ok"] > 0


# -- bombs -----------------------------------------------------------------------------------------


def _pids_current(container) -> int:
    return int(Path(f"/sys/fs/cgroup/pids/docker/{container.id}/pids.current").read_text())


@pytest.mark.parametrize("task", ["bomb", "slow-check"])  # cpus = 1, 512 MB; the defaults
def test_fork_bomb_stays_inside_its_pids_limit(hostile, docker_client, task):
    with hostile.client() as bomber, hostile.client() as neighbour:
        assert bomber.reset(task_id=task).observation.error is None
        assert neighbour.reset(task_id="edit-file").observation.error is None
        container = _container_of(docker_client, hostile, task)
        bomb = bomber.exec("bomb() { bomb | bomb & }; bomb; sleep 1", timeout_s=10)
        assert bomb.observation.error is None or bomb.observation.timed_out
        peak, latencies, host = 0, [], []
        for _ in range(10):
            with contextlib.suppress(FileNotFoundError):
                peak = max(peak, _pids_current(container))
            start = time.monotonic()
            answer = neighbour.exec("echo ok").observation
            assert answer.output.strip() == "ok", (answer, hostile.output[-3000:])
            latencies.append(time.monotonic() - start)
            start = time.monotonic()
            subprocess.run(["true"], check=True)
            host.append(time.monotonic() - start)
        print(
            f"fork bomb: peak {peak} processes (limit {PIDS_LIMIT}); neighbour exec max"
            f" {max(latencies) * 1000:.0f} ms, host spawn max {max(host) * 1000:.0f} ms"
        )
        assert container.attrs["HostConfig"]["PidsLimit"] == PIDS_LIMIT
        assert PIDS_LIMIT * 0.5 <= peak <= PIDS_LIMIT  # the bomb ran, and stopped at the limit
        assert max(latencies) < 5 and max(host) < 1
        start = time.monotonic()
        result = bomber.evaluate()  # every bomb process is stopped before the verifier
        took = time.monotonic() - start
        print(f"fork bomb ({task}): evaluate took {took:.1f} s, load {os.getloadavg()[0]:.1f}")
        # A scored episode, or an error naming the agent's resource use: never a silent None.
        scored = (result.reward, result.observation.error) == (0.0, None)
        assert scored or "process limit" in (result.observation.error or ""), result.observation
        assert result.done


def test_memory_bomb_is_held_by_the_memory_limit(hostile, docker_client):
    with hostile.client() as env:
        env.reset(task_id="limits")  # memory = "256M"
        container = _container_of(docker_client, hostile, "limits")
        before = _rss_mib(hostile.process.pid)
        bomb = env.exec("python3 -c 'b = bytearray(2 << 30)'; echo exit=$?")
        cgroup = Path(f"/sys/fs/cgroup/memory/docker/{container.id}")
        peak = int((cgroup / "memory.max_usage_in_bytes").read_text()) / 2**20
        failcnt = int((cgroup / "memory.failcnt").read_text())
        print(f"memory bomb: {bomb.observation.output.strip()}, peak {peak:.0f} MiB of 256 MiB")
        assert "exit=137" in bomb.observation.output  # the kernel's OOM killer, inside the box
        assert peak <= 256 and failcnt > 0
        assert env.exec("echo still here").observation.output.strip() == "still here"
        assert _rss_mib(hostile.process.pid) - before < 50
        assert env.evaluate().reward == 1.0


def test_output_bombs_are_capped_without_growing_the_server(hostile):
    bomb = "head -c 200000000 /dev/zero | tr '\\0' a; head -c 50000000 /dev/urandom >&2"

    def round_of_bombs() -> None:
        def one(_: int) -> None:
            with hostile.client() as env:
                env.reset(task_id="edit-file")
                out = env.exec(bomb).observation
                assert out.truncated and len(out.output) <= 1 << 20
                env.exec("head -c 100000000 /dev/urandom > big.bin")
                read = env.read("big.bin").observation
                assert read.truncated and read.encoding == "base64"

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(one, range(4)))

    pid = hostile.process.pid
    start = _rss_mib(pid)
    round_of_bombs()  # the first round may grow pools and caches once
    warm = _rss_mib(pid)
    for _ in range(3):
        round_of_bombs()
    end = _rss_mib(pid)
    print(
        f"output bombs: server RSS {start:.0f} MiB -> {warm:.0f} MiB after 4 sessions x (250 MB"
        f" exec output + 100 MB read) -> {end:.0f} MiB after 12 more"
    )
    assert warm - start < 400  # four 8 MiB reads in flight at once, and their JSON
    # Not a leak: one round's buffers are ~4 x 30 MB, three rounds kept would be ~360 MB more.
    assert end - warm < 160, "the server's memory grows with every bomb"


# -- bad requests ----------------------------------------------------------------------------------


def _alive(ws) -> dict:
    """The reply to a harmless exec; the caller checks it said "alive"."""
    ws.send(json.dumps({"type": "step", "data": {"action_type": "exec", "command": "echo alive"}}))
    return json.loads(ws.recv(timeout=60))


def _said_alive(reply: dict) -> bool:
    return reply.get("data", {}).get("observation", {}).get("output") == "alive\n"


def _step(action: dict) -> str:
    return json.dumps({"type": "step", "data": action})


BAD_REQUESTS = {
    "invalid JSON": ("{not json", "Invalid JSON"),
    "a JSON array": ("[1, 2, 3]", "expected a JSON object, got list"),
    "a JSON string": ('"reset"', "expected a JSON object, got str"),
    "JSON nested 100,000 deep": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "unknown message type": (json.dumps({"type": "rm -rf"}), "Unknown message type"),
    "step without data": (json.dumps({"type": "step"}), "Invalid message"),
    "unknown action type": (_step({"action_type": "sudo"}), "Invalid message"),
    "wrong field type": (_step({"action_type": "exec", "command": 1}), "Invalid message"),
    "unknown field": (_step({"action_type": "exec", "command": "x", "as_root": 1}), "Invalid"),
    "negative timeout": (
        _step({"action_type": "exec", "command": "x", "timeout_s": -1}),
        "greater than 0",
    ),
    "evaluate without a token": (_step({"action_type": "evaluate"}), "orchestration action"),
    "solve with a wrong token": (
        _step({"action_type": "solve", "token": "guess"}),
        "orchestration action",
    ),
    "NUL in a path": (_step({"action_type": "read", "path": "a\0b"}), "invalid path"),
    "12 MiB write": (
        _step({"action_type": "write", "path": "big", "content": "x" * (12 << 20)}),
        "over this server's limit",
    ),
    "3 MB command": (_step({"action_type": "exec", "command": "x" * 3_000_000}), "too long"),
    "reset with a bad index": (
        json.dumps({"type": "reset", "data": {"index": "first"}}),
        "index must be int",
    ),
}


def test_bad_requests_get_clear_errors_and_the_session_survives(hostile):
    with connect(_ws_url(hostile), max_size=None) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task_id": "edit-file"}}))
        assert json.loads(ws.recv(timeout=120))["type"] == "observation"
        for name, (message, expected) in BAD_REQUESTS.items():
            ws.send(message)
            reply = json.loads(ws.recv(timeout=120))
            data = reply["data"]
            error = data.get("message") or data["observation"].get("error") or ""
            if reply["type"] == "observation" and not error:
                error = data["observation"]["output"]  # e.g. the shell's own complaint
            if "errors" in data:
                error += json.dumps(data["errors"])
            assert expected in error, (name, reply)
            if message.startswith('{"type": "reset"'):
                ws.send(json.dumps({"type": "reset", "data": {"task_id": "edit-file"}}))
                ws.recv(timeout=120)
            reply = _alive(ws)
            assert _said_alive(reply), (name, reply)
        ws.send(b"\x00binary frame")
        assert "binary frame" in json.loads(ws.recv(timeout=60))["data"]["message"]
        assert _said_alive(_alive(ws))
    print(f"bad requests: {len(BAD_REQUESTS) + 1} kinds, each answered, the session lived on")


def test_a_frame_over_the_transport_limit_closes_only_that_connection(hostile):
    with connect(_ws_url(hostile), max_size=None) as other:
        other.send(json.dumps({"type": "reset", "data": {"task_id": "edit-file"}}))
        other.recv(timeout=120)
        with connect(_ws_url(hostile), max_size=None) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"task_id": "edit-file"}}))
            ws.recv(timeout=120)
            huge = _step({"action_type": "write", "path": "big", "content": "x" * (50 << 20)})
            with pytest.raises(ConnectionClosed) as closed:
                ws.send(huge)
                ws.recv(timeout=60)
        assert closed.value.rcvd.code == 1009  # "message too big", said to the client
        assert _said_alive(_alive(other))
    assert httpx.get(f"{hostile.url}/health").status_code == 200


# -- load with faults ------------------------------------------------------------------------------


def test_load_with_disconnects_and_a_server_kill(docker_client, tasks):
    """32 sessions, random abrupt disconnects, kill -9 of the server mid-run, then a restart."""
    first = Server(tasks, HARBOR_OPENENV_MAX_SESSIONS="40")
    url = _ws_url(first)
    stop = threading.Event()
    lock = threading.Lock()
    completed: list[tuple[float, float | None]] = []
    disconnects, failures = [0], []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            ws = None
            try:
                ws = connect(url, max_size=None, open_timeout=30)
                ws.send(json.dumps({"type": "reset", "data": {"task_id": "edit-file"}}))
                reply = json.loads(ws.recv(timeout=300))
                assert reply["type"] == "observation", reply
                assert reply["data"]["observation"]["error"] is None, reply["data"]["observation"]
                solved = rng.random() < 0.5
                answer = "42\n" if solved else f"{rng.randint(0, 41)}\n"
                ws.send(_step({"action_type": "write", "path": "answer.txt", "content": answer}))
                wrote = json.loads(ws.recv(timeout=300))["data"]["observation"]
                assert wrote["error"] is None, wrote
                if rng.random() < 0.25:  # a trainer that crashes mid-episode
                    ws.socket.close()
                    with lock:
                        disconnects[0] += 1
                    continue
                ws.send(_step({"action_type": "evaluate", "token": "test-orchestration-token"}))
                reply = json.loads(ws.recv(timeout=300))
                with lock:
                    completed.append((1.0 if solved else 0.0, reply["data"]["reward"]))
                    if reply["data"]["observation"]["error"] is not None:
                        failures.append(reply["data"]["observation"]["error"])
                ws.close()
            except Exception as exc:
                if not stop.is_set():  # set just before the kill: later errors are expected
                    failures.append(repr(exc))
                return
            finally:
                if ws is not None:
                    with contextlib.suppress(Exception):
                        ws.socket.close()

    started = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=32)
    try:
        futures = [pool.submit(worker, seed) for seed in range(32)]
        wait_until(lambda: len(completed) >= 48, timeout=150, interval=0.5)
        stop.set()
        first.process.send_signal(signal.SIGKILL)  # mid-run: sessions are open everywhere
        first.process.wait()
        killed_at = time.monotonic() - started
        for future in futures:
            future.result(timeout=360)
    finally:
        stop.set()
        pool.shutdown(wait=False)
        first.stop(signal.SIGKILL)
    left = len(runtime_containers(docker_client, first.owner_prefix))
    second = Server(tasks)  # its startup removes what the killed server left
    try:
        assert runtime_containers(docker_client, first.owner_prefix) == []
        with second.client() as env:
            env.reset(task_id="edit-file")
            env.write("answer.txt", "42")
            assert env.evaluate().reward == 1.0
    finally:
        second.stop()
    wrong = [(want, got) for want, got in completed if want != got]
    print(
        f"load: {len(completed)} episodes scored and {disconnects[0]} abrupt disconnects in"
        f" {killed_at:.0f} s with 32 sessions; kill -9 left {left} containers, the restart"
        f" removed them; {len(wrong)} wrong rewards, {len(failures)} errors before the kill"
    )
    assert not failures, (failures[:3], first.output[-6000:])
    assert len(completed) >= 48 and not wrong, wrong[:5]
    assert wait_until(lambda: runtime_containers(docker_client, second.owner_prefix) == [])
