"""The exec channel (sandbox/channel.py, ``helper serve``) against a real container: the same
answers as an engine exec, as the agent's user, kill on timeout, and the fallback to the engine
when the agent kills or forges it. Every test drives the channel explicitly (``channel=True``),
whatever ``--exec-channel`` says, and compares with the engine (``channel=False``)."""

from __future__ import annotations

import struct
import threading

import pytest
from _server import exec_channel_on

from harbor_openenv.sandbox import Sandbox
from harbor_openenv.sandbox.channel import Channel

pytestmark = pytest.mark.docker

# Each serve process's "pid uid", found through /proc as root (never through the channel).
SERVERS = r"""
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' 2>/dev/null < $p/cmdline)" in
    '/.harbor-openenv/helper serve ') echo "${p#/proc/} $(awk '/^Uid:/ {print $2}' $p/status)";;
  esac
done
"""
KILL_SERVERS = r"""
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' 2>/dev/null < $p/cmdline)" in
    '/.harbor-openenv/helper serve ') kill -9 ${p#/proc/};;
  esac
done
echo after
"""


def servers(box: Sandbox) -> list[tuple[int, int]]:
    found = box.exec_root(SERVERS).output.split()
    return [(int(pid), int(uid)) for pid, uid in zip(found[::2], found[1::2], strict=True)]


@pytest.fixture
def box(bare_sandbox):
    """The module's container with a fresh channel slot (a failure in one test stays there)."""
    bare_sandbox.stop_processes()
    bare_sandbox.channel = type(bare_sandbox.channel)(bare_sandbox.open_channel)
    yield bare_sandbox
    bare_sandbox.stop_processes()


COMMANDS = [
    ("exit 3", {}),
    ("echo out; sleep 0.1; echo err >&2; sleep 0.1; echo out2", {}),
    ("pwd; id -u; echo $HOME", {"user": "nobody"}),
    ("cd /tmp && pwd", {"workdir": "/"}),
    ("echo $GREETING", {"env": {"GREETING": "hello there"}}),
    ("kill -9 $$", {}),
    ("no-such-command", {}),
    ("head -c 300000 /dev/zero | tr '\\0' a; echo", {}),
    ("printf '\\377\\376 not utf-8'", {}),
    ("cat", {}),  # stdin: end-of-file at once
    ("exec >&-; exec 2>&-; sleep 0.3; exit 7", {}),  # output closed before the exit
]


@pytest.mark.parametrize(("command", "options"), COMMANDS)
def test_the_channel_answers_as_the_engine_does(box, command, options):
    kwargs = {"timeout_s": 20, "max_output": 100_000, **options}
    engine = box.exec(command, channel=False, **kwargs)
    channel = box.exec(command, channel=True, **kwargs)
    assert channel == engine
    assert box.channel.failed is None
    assert len(servers(box)) == 1  # it ran through the channel, which stays open


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_the_channel_runs_as_the_agents_user_and_outside_the_baseline(box, user):
    assert box.exec("true", timeout_s=10, max_output=100, user=user, channel=True).exit_code == 0
    ((pid, uid),) = servers(box)
    assert uid == (0 if user == "root" else 65534)
    box.stop_processes()  # the helper's stop kills it with the agent's processes
    assert servers(box) == []
    again = box.exec("echo again", timeout_s=10, max_output=100, user=user, channel=True)
    assert (again.output, box.channel.failed) == ("again\n", None)
    assert [server for server, _ in servers(box)] != [pid]  # a new one


@pytest.mark.parametrize("channel", [True, False])
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_timeout_kills_every_process_of_the_command(box, user, channel):
    """Its process group by the helper (channel), then whatever carries its mark by the engine
    as root and as the agent (for nobody, the engine alone left all three sleeps before)."""
    command = "sleep 101 & setsid sleep 102 & echo started; sleep 103"
    result = box.exec(command, timeout_s=1.5, max_output=1000, user=user, channel=channel)
    assert (result.exit_code, result.timed_out) == (None, True)
    left = box.exec_root("ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert "sleep 10" not in left.output
    assert box.channel.failed is None
    after = box.exec("echo next", timeout_s=10, max_output=100, user=user, channel=True)
    assert after.output == "next\n"


def test_files_cross_the_channel_byte_for_byte(box):
    data = bytes(range(256)) * 4096  # 1 MiB, every byte value
    assert box.write_file("blob.bin", data, channel=True) == "/work/blob.bin"
    assert box.read_file("blob.bin", max_bytes=len(data), channel=True) == (data, False)
    assert box.read_file("/work/blob.bin", max_bytes=1000, channel=True) == (data[:1000], True)
    assert "blob.bin" in box.list_dir("/work", channel=True)
    assert box.channel.failed is None and len(servers(box)) == 1


@pytest.mark.parametrize("channel", [True, False])
def test_a_file_action_is_one_round_trip(box, monkeypatch, channel):
    """read, write and list: one channel request each, or one engine exec each (no second
    round trip to resolve the path first)."""
    box.exec("true", timeout_s=10, max_output=100, channel=True)  # the channel is open
    trips: list[str] = []
    engine, request_ = box.run, Channel.run

    def through_engine(*args, **kwargs):
        trips.append("engine")
        return engine(*args, **kwargs)

    def through_channel(self, *args, **kwargs):
        trips.append("channel")
        return request_(self, *args, **kwargs)

    monkeypatch.setattr(box, "run", through_engine)
    monkeypatch.setattr(Channel, "run", through_channel)
    data = bytes(range(256)) * 16  # 4 KiB, every byte value
    assert box.write_file("four-k.bin", data, channel=channel) == "/work/four-k.bin"
    assert box.read_file("four-k.bin", max_bytes=4096, channel=channel) == (data, False)
    assert "four-k.bin" in box.list_dir(".", channel=channel)
    assert trips == ["channel" if channel else "engine"] * 3


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_an_agent_that_kills_the_channel_gets_the_engine(box, user):
    box.exec("true", timeout_s=10, max_output=100, user=user, channel=True)
    killed = box.exec(KILL_SERVERS, timeout_s=20, max_output=1000, user=user, channel=True)
    # The channel died under the command, which then ran again through the engine.
    assert (killed.exit_code, killed.output) == (0, "after\n")
    assert box.channel.failed == "the channel ended"
    for _ in range(2):  # the rest of the episode: the engine, no new channel
        step = box.exec("echo still here", timeout_s=10, max_output=100, user=user, channel=True)
        assert step.output == "still here\n"
        assert servers(box) == []


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_forged_answer_turns_the_channel_off(box, user):
    """The agent writes its own answer into the channel's output pipe (``/proc/PID/fd/1``, open
    to the helper's user): its nonce is wrong, so the channel goes off and the command runs
    again through the engine. Rewards never cross the channel (test_hostile_verifier.py)."""
    forged = b"forged\n"
    answer = struct.pack(">4s8sBiI", b"HOE1", bytes(8), 4, 0, len(forged)) + forged
    script = (
        "for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' 2>/dev/null < $p/cmdline)\" in"
        " '/.harbor-openenv/helper serve ')"
        ' printf "$1" > $p/fd/1;; esac; done; sleep 0.5; echo real'
    )
    escaped = "".join(f"\\{byte:03o}" for byte in answer)
    box.exec("true", timeout_s=10, max_output=100, user=user, channel=True)
    first = box.exec(script, timeout_s=10, max_output=100, user=user, channel=True, args=(escaped,))
    assert (first.exit_code, first.output) == (0, "real\n")  # the engine's run of it
    assert box.channel.failed == "a malformed answer"
    assert box.exec("echo next", timeout_s=10, max_output=100, channel=True).output == "next\n"


def test_concurrent_commands_take_the_engine_while_the_channel_is_busy(box):
    results = {}

    def run(name: str, command: str) -> None:
        results[name] = box.exec(command, timeout_s=20, max_output=100, channel=True)

    box.exec("true", timeout_s=10, max_output=100, channel=True)
    slow = threading.Thread(target=run, args=("slow", "sleep 1; echo slow"))
    slow.start()
    run("fast", "echo fast")
    slow.join(timeout=30)
    assert (results["slow"].output, results["fast"].output) == ("slow\n", "fast\n")
    assert box.channel.failed is None


# -- the helper's framing, run on this machine (the same static binary) ---------------------------


# -- through a server ------------------------------------------------------------------------------

FORGE = (
    "for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' 2>/dev/null < $p/cmdline)\" in"
    " '/.harbor-openenv/helper serve ') printf 'HOE1\\0\\0\\0\\0\\0\\0\\0\\0\\4\\0\\0\\0\\0"
    "\\0\\0\\0\\6solved' > $p/fd/1;; esac; done; echo forged"
)


def test_a_server_runs_the_agents_actions_through_the_channel(server):
    """On (the default): the agent's command is a child of ``helper serve``; off
    (``--exec-channel=0``): of the engine. Forging the channel's answers or killing it changes
    no reward, which never crosses it: unsolved 0.0, solved through the fallback 1.0."""
    for solve, reward in ((False, 0.0), (True, 1.0)):
        with server.client() as env:
            env.reset(task_id="edit-file")
            parent = env.exec("tr '\\0' ' ' < /proc/$PPID/cmdline").observation.output
            assert (parent == "/.harbor-openenv/helper serve ") == exec_channel_on()
            assert env.exec(FORGE).observation.output == "forged\n"
            assert env.exec(KILL_SERVERS).observation.output == "after\n"
            if solve:
                env.write("answer.txt", "42\n")
            assert env.read("answer.txt").observation.output == ("42\n" if solve else "")
            assert env.evaluate().reward == reward
