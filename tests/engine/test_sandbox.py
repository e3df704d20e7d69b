"""Sandbox primitives against a real container: reads through the engine, writes as the agent's
user, the helper's stop, and docker-py's exec stream."""

from __future__ import annotations

import functools
import gc
import http.client
import io
import os
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harbor_openenv.helper import HELPER
from harbor_openenv.sandbox import EngineRead, PathEscapeError, Sandbox, SandboxError, TooLargeError
from harbor_openenv.sandbox.command import Command

pytestmark = pytest.mark.docker

OUT = "/logs/out"


def fill(box: Sandbox, script: str) -> None:
    """A fresh OUT folder made by ``script`` as root."""
    result = box.exec_root(f"rm -rf {OUT} && mkdir -p {OUT} && cd {OUT} && {script}")
    assert result.exit_code == 0, result.output


def test_the_keeper_is_pid_1_alone_reaps_orphans_and_outlives_every_stop(bare_sandbox):
    """PID 1 is the runtime's helper and the container's only process, so a stop kills every
    other process without ending the container (the old keeper,
    ``sh -c "sleep infinity"``, died with its sleep whenever the baseline was listed before sh had
    forked it: an evaluate then failed with the helper's exit code 137). PID 1 reaps the orphans
    an agent leaves (their zombies would fill the pids limit) and ignores a root agent's
    signals."""
    processes = bare_sandbox.container.top()["Processes"]
    assert [row[-1] for row in processes] == [f"{HELPER} keep"], processes
    run = bare_sandbox.exec_root(
        "for i in 1 2 3 4 5; do (sleep 60 &) ; done; kill -TERM 1; kill -INT 1; echo started"
    )
    assert run.exit_code == 0, run.output
    bare_sandbox.stop_processes()
    time.sleep(1)
    states = bare_sandbox.exec_root("cat /proc/[0-9]*/stat 2>/dev/null | awk '{print $3}'")
    assert "Z" not in states.output.split(), states.output
    assert bare_sandbox.is_running()
    assert len(bare_sandbox.container.top()["Processes"]) == 1


def test_the_keeper_ends_on_the_engines_stop(docker_client):
    """SIGTERM from the engine (outside the container's PID namespace) ends the keeper at once,
    where ``docker stop`` waited out its grace period for a PID 1 that ignores it."""
    from harbor_openenv.sandbox import remove_containers
    from harbor_openenv.sandbox.spec import ContainerSpec
    from harbor_openenv.sandbox.starter import DockerStarter

    owner = f"test-keeper-{time.monotonic_ns()}"
    backend = DockerStarter(lambda: docker_client, owner=owner)
    box = backend.start(ContainerSpec("debian:bookworm-slim", network="none"), task_id="keeper")
    try:
        started = time.monotonic()
        box.container.stop(timeout=30)
        took = time.monotonic() - started
        box.container.reload()
        assert box.container.attrs["State"]["ExitCode"] == 0, box.container.attrs["State"]
        assert took < 10, took
    finally:
        box.remove()
        remove_containers(docker_client, owner=owner)


def test_engine_streams_leave_no_descriptor_open(bare_sandbox):
    """An engine exec and a keeper ask close their sockets themselves: docker-py's wrapper alone
    kept each descriptor until the garbage collector ran, and a long-lived process went past 1024
    (select()'s limit: "filedescriptor out of range" in a stop)."""
    gc.collect()
    gc.disable()  # what is left open is left by the code, not waiting for the collector
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            assert bare_sandbox.run(Command(("true",), 30, 1 << 10, user="0")).exit_code == 0
            bare_sandbox.stop_processes()
        after = len(os.listdir("/proc/self/fd"))
    finally:
        gc.enable()
    assert after - before < 5, (before, after)


def test_stops_that_come_at_once_take_turns(bare_sandbox):
    """The disk guard's stop and an evaluate's can come at once; side by side, each helper kills
    the other (a process outside the baseline) and one fails with exit code 137."""
    for _ in range(5):  # many processes: each stop takes long enough to overlap the others
        bare_sandbox.exec_root("for i in $(seq 300); do (sleep 60 &) ; done")
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: bare_sandbox.stop_processes(), range(4)))
    assert bare_sandbox.is_running()


def test_engine_reads_use_no_program_of_the_container(bare_sandbox):
    fill(bare_sandbox, "printf '1\\n' > reward.txt && seq 1 100000 > stdout.txt")
    # An agent with root replaced the programs an in-container read would use.
    hide = "for p in base64 tail wc cat head; do mv /usr/bin/$p /usr/bin/$p.off; done"
    assert bare_sandbox.exec_root(hide).exit_code == 0
    try:
        assert bare_sandbox.read_engine_file(f"{OUT}/reward.txt", limit=100) == b"1\n"
        tail = bare_sandbox.read_engine_file(f"{OUT}/stdout.txt", limit=12, tail=True)
        assert tail == b"99999\n100000\n"[-12:]
        assert bare_sandbox.read_engine_file(f"{OUT}/missing", limit=100) is None
    finally:
        bare_sandbox.exec_root("for f in /usr/bin/*.off; do mv $f ${f%.off}; done")


def test_engine_reads_refuse_links_and_oversized_files_before_reading(bare_sandbox):
    fill(
        bare_sandbox,
        "echo secret > /root-only && ln -s /root-only link"
        " && truncate -s 3G sparse.json && mkdir folder",
    )
    with pytest.raises(SandboxError, match="not a regular file"):
        bare_sandbox.read_engine_file(f"{OUT}/link", limit=100)
    with pytest.raises(SandboxError, match="not a regular file"):
        bare_sandbox.read_engine_file(f"{OUT}/folder", limit=1 << 20)
    start = time.monotonic()
    with pytest.raises(TooLargeError, match="3221225472 bytes"):
        bare_sandbox.read_engine_file(f"{OUT}/sparse.json", limit=1 << 20)
    with pytest.raises(TooLargeError):
        bare_sandbox.read_engine_file(f"{OUT}/sparse.json", limit=100, tail=True)
    assert time.monotonic() - start < 2  # refused from its size, not read through


def read_bytes() -> int:
    """Bytes this process has read so far, sockets included (``rchar``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_a_folder_read_answers_as_reads_one_by_one(bare_sandbox):
    """One engine read of the folder gives what reading each name alone gives: regular files,
    their tails, absent names, links and folders (refused), hard links (a tar of the folder
    holds them as links: read alone), sparse files over the limit (refused by size)."""
    fill(
        bare_sandbox,
        "seq 1 100000 > out.txt && printf 1 > a && ln a hard && printf 2 > regular"
        " && ln -s a soft && mkdir folder && truncate -s 8G sparse",
    )
    names = {name: 100 for name in ("out.txt", "hard", "regular", "soft", "folder", "sparse")}
    names["absent"] = 100
    before = read_bytes()
    together = bare_sandbox.read_engine_files(OUT, names, tails=("out.txt",))
    assert read_bytes() - before < 1 << 24  # the 8 GiB file was never streamed
    for name, limit in names.items():
        alone = EngineRead.attempt(
            functools.partial(
                bare_sandbox.read_engine_file, f"{OUT}/{name}", limit=limit, tail=name == "out.txt"
            )
        )
        assert (together[name].data, str(together[name].error)) == (
            alone.data,
            str(alone.error),
        ), name
    assert together["out.txt"].data == "".join(f"{i}\n" for i in range(1, 100001)).encode()[-100:]
    assert (together["hard"].data, together["regular"].data) == (b"1", b"2")
    assert together["absent"].get() is None
    assert "not a regular file" in str(together["soft"].error)
    assert "8589934592 bytes" in str(together["sparse"].error)


def test_a_folder_read_leaves_a_huge_other_file_unread(bare_sandbox):
    fill(bare_sandbox, "truncate -s 8G a-huge.log && printf 0.5 > reward.txt")
    before = read_bytes()
    found = bare_sandbox.read_engine_files(OUT, {"reward.txt": 100, "reward.json": 100})
    assert read_bytes() - before < 1 << 24
    assert (found["reward.txt"].get(), found["reward.json"].get()) == (b"0.5", None)


def test_exec_after_stages_before_the_command_and_gives_it_no_input(bare_sandbox):
    fill(bare_sandbox, "true")
    staged = lambda: bare_sandbox.upload(OUT, pack_one("staged.txt", b"here"))  # noqa: E731
    run = bare_sandbox.exec(
        f"cat {OUT}/staged.txt; readlink /proc/self/fd/0",
        timeout_s=30,
        max_output=100,
        after=staged,
    )
    assert (run.exit_code, run.output) == (0, "here/dev/null\n")

    def broken() -> None:
        raise SandboxError("staging failed")

    with pytest.raises(SandboxError, match="staging failed"):
        bare_sandbox.exec(f"touch {OUT}/ran", timeout_s=30, max_output=100, after=broken)
    time.sleep(0.5)  # had the shell gone on, its touch would be done by now
    assert bare_sandbox.read_engine_file(f"{OUT}/ran", limit=10) is None


def pack_one(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_export_stops_at_its_budget(bare_sandbox):
    fill(bare_sandbox, "head -c 4000 /dev/urandom > a && truncate -s 2G b && ln -s a c")
    with tempfile.TemporaryFile() as target:
        assert bare_sandbox.export_path(f"{OUT}/a", target, budget=5000)
        assert not bare_sandbox.export_path(f"{OUT}/none", target, budget=5000)
    with tempfile.TemporaryFile() as target, pytest.raises(TooLargeError):
        bare_sandbox.export_path(OUT, target, budget=1 << 20)


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_write_keeps_an_existing_files_mode_owner_and_group(bare_sandbox, user):
    fill(
        bare_sandbox,
        "rm -rf /work/w && mkdir -p /work/w && chmod 777 /work/w && cd /work/w"
        " && printf 'old content, longer than the new' > run.sh && chmod 775 run.sh"
        + (" && chown nobody:users run.sh" if user == "nobody" else " && chgrp users run.sh"),
    )
    written = bare_sandbox.write_file("w/run.sh", b"#!/bin/sh\necho new\n", user=user)
    assert written == "/work/w/run.sh"
    bare_sandbox.write_file("/work/w/new.txt", b"fresh\n", user=user)
    bare_sandbox.write_file("/work/w/p/q/deep.txt", b"deep\n", user=user)
    stat = bare_sandbox.exec_root(
        "cd /work/w && stat -c '%n %a %U %G' run.sh new.txt p p/q p/q/deep.txt"
    )
    group = "nogroup" if user == "nobody" else "root"
    assert stat.output.split("\n")[:5] == [
        f"run.sh 775 {user} users",  # the same inode, truncated in place
        f"new.txt 644 {user} {group}",  # the exec's umask, 022
        f"p 755 {user} {group}",  # parent folders made for the write
        f"p/q 755 {user} {group}",
        f"p/q/deep.txt 644 {user} {group}",
    ]
    assert bare_sandbox.exec("/work/w/run.sh", timeout_s=10, max_output=100).output == "new\n"


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_read_and_write_carry_every_byte_value(bare_sandbox, user):
    fill(bare_sandbox, "rm -rf /work/b && mkdir -p /work/b && chmod 777 /work/b")
    data = bytes(range(256)) * 3 + b"\xff\xfe invalid UTF-8 \xc3("
    bare_sandbox.write_file("b/all.bin", data, user=user)
    assert bare_sandbox.read_file("b/all.bin", max_bytes=len(data), user=user) == (data, False)
    assert bare_sandbox.read_file("b/all.bin", max_bytes=300, user=user) == (data[:300], True)
    copy = bare_sandbox.exec_root("od -An -v -tx1 /work/b/all.bin | tr -d ' \n'")
    assert copy.output == data.hex()
    bare_sandbox.write_file("b/empty", b"", user=user)
    assert bare_sandbox.read_file("b/empty", max_bytes=10, user=user) == (b"", False)


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_paths_through_symlinks_leaving_the_workdir_are_refused(bare_sandbox, user):
    fill(bare_sandbox, "echo secret > /root-only && chmod 644 /root-only")
    setup = (
        "rm -rf /work/l /nowhere && mkdir -p /work/l/d && cd /work/l && echo inside > d/f"
        " && ln -s /etc etc && ln -s /root-only file && ln -s /nowhere/new dangling"
        " && ln -s ../l/d inner && ln -s new.txt fresh && chmod -R 777 /work/l"
    )
    assert bare_sandbox.exec_root(setup).exit_code == 0
    with pytest.raises(PathEscapeError, match="'l/etc/passwd' resolves to /etc/passwd, outside"):
        bare_sandbox.read_file("l/etc/passwd", max_bytes=100, user=user)
    with pytest.raises(PathEscapeError, match="resolves to /root-only"):
        bare_sandbox.read_file("l/file", max_bytes=100, user=user)
    with pytest.raises(PathEscapeError, match="resolves to /etc,"):
        bare_sandbox.list_dir("l/etc", user=user)
    with pytest.raises(PathEscapeError, match="resolves to /nowhere/new,"):
        bare_sandbox.write_file("l/dangling", b"x", user=user)  # a dangling link out
    with pytest.raises(PathEscapeError, match="resolves to /etc/made/here,"):
        bare_sandbox.write_file("/work/l/etc/made/here", b"x", user=user)
    with pytest.raises(PathEscapeError):
        bare_sandbox.read_file("../etc/passwd", max_bytes=100, user=user)  # lexical
    left = bare_sandbox.exec_root("ls -d /nowhere /etc/made 2>&1; cat /root-only")
    assert "No such file" in left.output and left.output.count("No such file") == 2
    assert left.output.endswith("secret\n")
    # Links that stay inside are followed, a dangling one to a new file included.
    assert bare_sandbox.read_file("l/inner/f", max_bytes=100, user=user) == (b"inside\n", False)
    assert bare_sandbox.write_file("l/fresh", b"new\n", user=user) == "/work/l/new.txt"
    assert "new.txt" in bare_sandbox.list_dir("/work/l", user=user)
    with pytest.raises(SandboxError, match="l/d: is a directory"):
        bare_sandbox.read_file("l/d", max_bytes=10, user=user)
    with pytest.raises(SandboxError, match="l/nothing: no such file or folder"):
        bare_sandbox.read_file("l/nothing", max_bytes=10, user=user)


def test_file_actions_need_no_shell_or_coreutils(bare_sandbox):
    """The helper does read and write alone, and lists in ``ls -la``'s very format when the image
    has no ``ls`` (the image's own ``ls`` is used where there is one)."""
    made = bare_sandbox.exec_root(
        "rm -rf /work/listing && mkdir /work/listing && cd /work/listing"
        " && echo hi > a.txt && touch -- '#hash' -dash .hidden Zed 'big file' && mkdir sub"
        " && chmod 1777 sub && ln -s a.txt link && mkfifo fifo && mknod null c 1 3"
        " && touch -d 2020-01-02 old && chmod 4755 old && chown 65534:12345 Zed"
    )
    assert made.exit_code == 0, made.output
    with_ls = bare_sandbox.list_dir("listing"), bare_sandbox.list_dir("listing/link")
    programs = ("dash", "bash", "cat", "head", "base64", "ls")
    hide = f"for p in {' '.join(programs)}; do mv /usr/bin/$p /usr/bin/$p.off; done"
    assert bare_sandbox.exec_root(hide).exit_code == 0
    try:
        assert bare_sandbox.write_file("alone.txt", b"no shell\n") == "/work/alone.txt"
        assert bare_sandbox.read_file("alone.txt", max_bytes=100) == (b"no shell\n", False)
        without = bare_sandbox.list_dir("listing"), bare_sandbox.list_dir("listing/link")
        assert without == with_ls
        (zed,) = [line for line in without[0].splitlines() if line.endswith(" Zed")]
        assert zed.split()[:5] == ["-rw-r--r--", "1", "nobody", "12345", "0"], without[0]
    finally:
        for name in programs:
            restore = ["/usr/bin/mv", f"/usr/bin/{name}.off", f"/usr/bin/{name}"]
            bare_sandbox.run(Command(restore, timeout_s=10, max_output=100, user="root"))


def test_writes_run_as_the_agents_user(bare_sandbox):
    fill(bare_sandbox, "echo root-only > /work/secret && chmod 600 /work/secret")
    with pytest.raises(SandboxError, match="ermission denied"):
        bare_sandbox.write_file("/work/secret", b"mine", user="nobody")
    with pytest.raises(SandboxError):
        bare_sandbox.read_file("/work/secret", max_bytes=100, user="nobody")
    assert bare_sandbox.read_file("/work/secret", max_bytes=100, user="root")[0] == b"root-only\n"


def test_output_read_along_with_the_response_headers_is_kept(bare_sandbox, monkeypatch):
    """docker-py issue 3332: when the client reads the exec's response late, its first read
    takes the headers and the output together; that output must not be lost (it was under load,
    as empty exec output). The client here waits before reading each response, as a loaded
    machine's would."""
    original = http.client.HTTPResponse.begin

    def late(self) -> None:
        time.sleep(0.3)
        original(self)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late)
    for _ in range(3):
        result = bare_sandbox.exec("echo hi", timeout_s=30, max_output=1000, channel=False)
        assert (result.exit_code, result.output) == (0, "hi\n")
