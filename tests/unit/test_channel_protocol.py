"""The exec channel's protocol without an engine: the memory backend has none, a timeout past the
frame's field is capped, what cannot cross takes the engine, and the host's helper binary
answers each request in turn and ends on a malformed one."""

from __future__ import annotations

import platform
import struct
import subprocess
from pathlib import Path

import pytest

from harbor_openenv import helper
from harbor_openenv.sandbox import ExecResult
from harbor_openenv.sandbox.channel import ChannelBusy, request
from harbor_openenv.sandbox.command import Command
from harbor_openenv.sandbox.memory import MemorySandbox


@pytest.fixture
def box(bare_sandbox):
    """The module's container with a fresh channel slot (a failure in one test stays there)."""
    bare_sandbox.stop_processes()
    bare_sandbox.channel = type(bare_sandbox.channel)(bare_sandbox.open_channel)
    yield bare_sandbox
    bare_sandbox.stop_processes()


# -- the helper's framing, run on this machine (the same static binary) ---------------------------

HOST_HELPER = Path(helper.__file__).parent / f"harbor-openenv-helper-{platform.machine()}"


def serve(frames: bytes) -> subprocess.CompletedProcess[bytes]:
    if not HOST_HELPER.is_file():
        pytest.fail(f"{HOST_HELPER} is missing: reinstall the runtime so its build hook runs")
    return subprocess.run([HOST_HELPER, "serve"], input=frames, capture_output=True, timeout=30)


# -- through a server ------------------------------------------------------------------------------


def test_the_memory_backend_has_no_channel():
    box = MemorySandbox(lambda *_: ExecResult(0, ""))
    assert box.open_channel("root") is None
    assert box.channel.run(Command(["true"], timeout_s=1, max_output=1, workdir="/")) is None
    assert box.channel.failed == "this backend has no channel"


def test_a_timeout_past_the_frames_field_is_capped_at_49_days():
    frame = request(Command(["true"], timeout_s=1e12, max_output=1, workdir="/"))
    assert struct.unpack_from(">I", frame, 12)[0] == 0xFFFFFFFF


def test_what_cannot_cross_the_channel_takes_the_engine():
    with pytest.raises(ChannelBusy):
        request(Command(["a\x00b"], timeout_s=1, max_output=1, workdir="/"))
    with pytest.raises(ChannelBusy):
        request(Command(["true"], timeout_s=1, max_output=1 << 30, workdir="/"))


def test_the_helper_answers_each_request_in_turn():
    frames = request(
        Command(
            ["sh", "-c", "cat; exit 5"], timeout_s=5, max_output=4, workdir="/", stdin=b"abcdefgh"
        )
    )
    frames += request(
        Command(["sh", "-c", "echo $X"], timeout_s=5, max_output=100, env={"X": "y"}, workdir="/")
    )
    done = serve(frames)
    assert done.returncode == 0
    assert done.stdout == (
        struct.pack(">4s8sBiI", b"HOE1", bytes(8), 4 | 2, 5, 4)
        + b"abcd"
        + struct.pack(">4s8sBiI", b"HOE1", bytes(8), 4, 0, 2)
        + b"y\n"
    )


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">I", 8) + b"12345678",  # shorter than its fixed fields
        struct.pack(">I", 1 << 31),  # over the size limit
        struct.pack(">I8sIIII", 24, bytes(8), 1000, 10, 0, 0),  # no argument
        struct.pack(">I8sIIII", 29, bytes(8), 1000, 10, 1, 0) + struct.pack(">I", 99) + b"/",
        request(Command(["true"], timeout_s=1, max_output=1, workdir="/"))[:-2],
    ],
)
def test_the_helper_ends_on_a_malformed_request(frame):
    done = serve(frame)
    assert (done.returncode, done.stdout) == (2, b"")
