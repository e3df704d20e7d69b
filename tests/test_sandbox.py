"""Sandbox.exec_then_read against a real container: the one-round-trip read and its fallback."""

from __future__ import annotations

import http.client
import io
import os
import tarfile
import time

import pytest

from harbor_openenv.sandbox import Sandbox

pytestmark = pytest.mark.docker

OUT = "/logs/out"
FILES = {"reward.txt": None, "reward.json": None, "stdout.txt": 100}


@pytest.fixture
def archive_reads(bare_sandbox, monkeypatch) -> list[str]:
    """The folders read through an archive (the fallback) during the test."""
    reads: list[str] = []
    original = bare_sandbox.get_files

    def counted(folder: str) -> dict[str, bytes]:
        reads.append(folder)
        return original(folder)

    monkeypatch.setattr(bare_sandbox, "get_files", counted)
    return reads


def fill(box: Sandbox, script: str) -> None:
    """A fresh OUT folder made by ``script`` (base64 put back if a test took it away)."""
    restore = "if [ -e /usr/bin/base64.off ]; then mv /usr/bin/base64.off /usr/bin/base64; fi"
    result = box.exec_root(
        f"{restore}; rm -rf {OUT} && mkdir -p {OUT} && chmod 777 {OUT} && cd {OUT} && {script}"
    )
    assert result.exit_code == 0, result.output


def test_files_come_back_with_the_command_in_one_round_trip(bare_sandbox, archive_reads):
    binary = os.urandom(3000)
    fill(bare_sandbox, "printf '1\\n' > reward.txt && seq 1 1000 > stdout.txt")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("reward.json")
        info.size = len(binary)
        archive.addfile(info, io.BytesIO(binary))
    bare_sandbox.container.put_archive(OUT, buffer.getvalue())

    result, files = bare_sandbox.exec_then_read("exit 3", OUT, FILES, timeout_s=30)

    assert archive_reads == []
    assert result.exit_code == 3  # the command's own status, not the read's
    assert files == {
        "reward.txt": b"1\n",
        "reward.json": binary,
        "stdout.txt": "\n".join(map(str, range(1, 1001))).encode()[-99:] + b"\n",
    }
    assert files == {
        name: data if FILES[name] is None else data[-FILES[name] :]
        for name, data in bare_sandbox.get_files(OUT).items()
    }


def test_absent_files_and_symlinks_are_left_out(bare_sandbox, archive_reads):
    fill(bare_sandbox, "echo secret > /root-only && ln -s /root-only reward.txt")
    result, files = bare_sandbox.exec_then_read("true", OUT, FILES, timeout_s=30)
    assert (result.exit_code, files, archive_reads) == (0, {}, [])


@pytest.mark.parametrize(
    ("why", "script", "command", "user"),
    [
        ("a file over the limit", "head -c 5000 /dev/zero > reward.json", "true", None),
        (
            "an image without base64",
            "echo 0.5 > reward.txt && mv /usr/bin/base64 /usr/bin/base64.off",
            "true",
            None,
        ),
        (
            "a file the user cannot read",
            "echo 0.5 > reward.txt && chmod 600 reward.txt",
            "true",
            "nobody",
        ),
        ("the command timed out", "echo 0.5 > reward.txt", "sleep 30", None),
    ],
)
def test_an_untrustworthy_read_falls_back_to_the_archive(
    bare_sandbox, archive_reads, why, script, command, user
):
    fill(bare_sandbox, script)
    _, files = bare_sandbox.exec_then_read(command, OUT, FILES, timeout_s=3, user=user, limit=4096)
    assert archive_reads == [OUT], why
    assert files == bare_sandbox.get_files(OUT), why
    assert files, why


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
        result = bare_sandbox.exec("echo hi", timeout_s=30, max_output=1000)
        assert (result.exit_code, result.output) == (0, "hi\n")
