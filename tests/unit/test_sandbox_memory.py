"""The behaviour :class:`Sandbox` builds on its primitives, on the in-memory fake (no engine).

The real backends' proof is the integration tests against a real engine (test_sandbox.py,
test_hardening.py, test_pool.py, ...); these pin down the shared logic alone, fast.
"""

from __future__ import annotations

import contextlib
import io
import shlex
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import cast

import pytest

from harbor_openenv import helper
from harbor_openenv.sandbox import ExecResult, PathEscapeError, Sandbox, SandboxError, TooLargeError
from harbor_openenv.sandbox.base import EXEC_MARK
from harbor_openenv.sandbox.engine_files import FOLDER_SKIP_BYTES, Archive
from harbor_openenv.sandbox.files import load_script
from harbor_openenv.sandbox.memory import MemorySandbox
from harbor_openenv.tasks.config import HealthcheckConfig

Call = tuple[str, str, dict[str, str], str]
OK = ExecResult(0, "")


class Recorder:
    """A handler that records each command and answers from a list (then ``default``)."""

    def __init__(self, *answers: ExecResult, default: ExecResult = OK) -> None:
        self.calls: list[Call] = []
        self.answers = list(answers)
        self.default = default

    def __call__(self, command: str, user: str, env: Mapping[str, str], workdir: str) -> ExecResult:
        self.calls.append((command, user, dict(env), workdir))
        return self.answers.pop(0) if self.answers else self.default


def test_exec_runs_bash_in_the_workdir_with_a_mark_and_kills_what_a_timeout_left():
    handler = Recorder(ExecResult(None, "partial", timed_out=True))
    sandbox = MemorySandbox(handler, workdir="/app")
    result = sandbox.exec("sleep 9", timeout_s=1, max_output=100, user="agent", env={"A": "1"})
    assert result.timed_out and result.output == "partial"
    (command, user, env, workdir), (kill, kill_user, _, _), (again, again_user, _, _) = (
        handler.calls
    )
    assert (command, user, workdir, env["A"]) == ("sleep 9", "agent", "/app", "1")
    assert kill == again == load_script("kill-marked")
    assert (kill_user, again_user) == ("root", "agent")  # root cannot read agent's environ
    assert env[EXEC_MARK]


def test_exec_output_is_cut_at_max_output():
    sandbox = MemorySandbox(Recorder(default=ExecResult(0, "x" * 50)))
    result = sandbox.exec("yes", timeout_s=1, max_output=10)
    assert result.truncated and result.output == "x" * 10


def test_exec_after_does_its_work_before_the_command_and_never_uses_the_channel():
    events: list[str] = []

    def handler(command: str, user: str, env: Mapping[str, str], workdir: str) -> ExecResult:
        events.append(command)
        return OK

    class NoChannel(MemorySandbox):
        def open_channel(self, user: str) -> None:
            raise AssertionError("the exec channel was asked")

    sandbox = NoChannel(handler)
    sandbox.exec(
        "/tests/test.sh", timeout_s=1, max_output=10, after=lambda: events.append("staged")
    )
    assert events == ["staged", "IFS= read -r _ || exit; exec </dev/null; /tests/test.sh"]

    def broken() -> None:
        raise SandboxError("staging failed")

    events.clear()
    with pytest.raises(SandboxError, match="staging failed"):
        sandbox.exec("/tests/test.sh", timeout_s=1, max_output=10, after=broken, channel=True)
    assert events == []  # the command never ran


def test_prepare_reads_the_workdir_its_real_path_and_asks_the_keeper_for_the_baseline():
    handler = Recorder(ExecResult(0, "/img\n/real/img\n"), ExecResult(0, "1:7 9:12"))
    sandbox = MemorySandbox(handler)
    sandbox.prepare(None)
    assert (sandbox.workdir, sandbox._real_workdir) == ("/img", "/real/img")
    assert handler.calls[1][0] == "keeper mark"
    failing = MemorySandbox(Recorder(ExecResult(1, "mkdir: denied")))
    with pytest.raises(SandboxError, match="preparing the container failed: mkdir: denied"):
        failing.prepare("/work")


def test_stop_names_every_user_whose_code_ran_since_the_baseline_and_prepares_in_one_request():
    handler = Recorder()
    sandbox = MemorySandbox(handler)
    sandbox.exec("true", timeout_s=1, max_output=10, user="nobody")  # before the baseline
    assert sandbox.mark_baseline() == []  # the keeper answered ok, with no process
    assert sandbox.ran_as == set()
    sandbox.exec("true", timeout_s=1, max_output=10, user="nobody", channel=True)
    sandbox.exec("true", timeout_s=1, max_output=10)  # the sandbox's own user: root
    sandbox.stop_processes(prepare=("nobody", "/logs/verifier", "/tests", "stage"))
    assert handler.calls[-1][0] == "keeper stop 0,nobody nobody /logs/verifier /tests stage"
    sandbox.mark_baseline()  # a new baseline: nothing ran since
    sandbox.stop_processes()
    assert handler.calls[-1][0] == "keeper stop "


def test_an_agent_command_the_disk_guard_interrupted_never_runs_again():
    handler = Recorder()
    sandbox = MemorySandbox(handler)
    sandbox.exceeded = "the agent's files took 400 MB"
    with pytest.raises(SandboxError, match="400 MB"):
        sandbox.exec("dd if=/dev/zero of=big", timeout_s=1, max_output=10, channel=True)
    assert handler.calls == []
    sandbox.exec("true", timeout_s=1, max_output=10)  # the orchestrator's commands still run
    assert len(handler.calls) == 1


def test_a_stop_whose_container_ended_says_so():
    sandbox = MemorySandbox(Recorder(ExecResult(97, "killed")))
    sandbox.removed = True
    with pytest.raises(SandboxError, match="the environment stopped running"):
        sandbox.stop_processes()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (ExecResult(97, "3 left"), r"could not stop the agent's processes \(code 97\): 3 left"),
        (ExecResult(98, "chown"), r"cannot prepare the verifier \(code 98\): chown"),
        (ExecResult(2, "usage"), r"the keeper failed \(code 2\): usage"),
    ],
)
def test_stop_processes_names_what_failed(answer: ExecResult, message: str):
    with pytest.raises(SandboxError, match=message):
        MemorySandbox(Recorder(answer)).stop_processes()


def test_an_answer_out_of_turn_is_an_error():
    sandbox = MemorySandbox(Recorder())
    sandbox.ask_keeper = lambda request, timeout_s: "0123 ok"  # type: ignore[method-assign]
    with pytest.raises(SandboxError, match="out of turn"):
        sandbox.stop_processes()


def test_put_dir_empties_the_destination_then_uploads_root_owned_files(tmp_path: Path):
    (tmp_path / "test.sh").write_text("exit 0\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("x")
    handler = Recorder()
    sandbox = MemorySandbox(handler)
    sandbox.put_dir(tmp_path, "/tests", executable="test.sh")
    assert handler.calls[0][0].startswith("rm -rf")
    assert sandbox.files == {"/tests/test.sh": b"exit 0\n", "/tests/data/x.txt": b"x"}
    with pytest.raises(SandboxError, match="cannot prepare /tests: busy"):
        MemorySandbox(Recorder(ExecResult(1, "busy"))).put_dir(tmp_path, "/tests")


def test_import_archive_makes_its_folder_and_streams_the_archive():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("out/a.txt")
        info.size = 2
        archive.addfile(info, io.BytesIO(b"hi"))
    buffer.seek(0)
    handler = Recorder()
    sandbox = MemorySandbox(handler)
    sandbox.import_archive("/logs/artifacts", buffer)
    assert handler.calls[0][0] == 'mkdir -p -- "$1"'
    assert sandbox.files == {"/logs/artifacts/out/a.txt": b"hi"}


def test_read_engine_file_checks_the_size_before_reading_and_keeps_a_tail():
    sandbox = MemorySandbox(Recorder(), files={"/logs/out.txt": b"0123456789"})
    assert sandbox.read_engine_file("/logs/missing", limit=100) is None
    assert sandbox.read_engine_file("/logs/out.txt", limit=100) == b"0123456789"
    with pytest.raises(TooLargeError, match="10 bytes, over the limit of 4"):
        sandbox.read_engine_file("/logs/out.txt", limit=4)
    assert sandbox.read_engine_file("/logs/out.txt", limit=4, tail=True) == b"6789"


class CountingSandbox(MemorySandbox):
    """Counts the engine reads (downloads) and the archive bytes each one's reader took."""

    def __init__(self, files: Mapping[str, bytes]) -> None:
        super().__init__(Recorder(), files=files)
        self.reads: list[tuple[str, io.BytesIO]] = []

    @contextlib.contextmanager
    def download(self, path: str) -> Iterator[Archive | None]:
        with super().download(path) as found:
            if found is not None:
                self.reads.append((path, cast(io.BytesIO, found.stream)))
            yield found

    def taken(self, path: str) -> int:
        """How far the reader of ``path``'s (first) archive got into it."""
        return next(stream.tell() for read, stream in self.reads if read == path)


VERIFIER = {"reward.json": 100, "reward.txt": 100, "reward-details.json": 100, "out.txt": 4}


def test_read_engine_files_reads_a_folder_once():
    sandbox = CountingSandbox(
        {
            "/v/reward.txt": b"1\n",
            "/v/reward-details.json": b"{}",
            "/v/out.txt": b"0123456789",
            "/v/nested/reward.json": b"not this one",
            "/v/other.log": b"x" * 1000,
        }
    )
    found = sandbox.read_engine_files("/v", VERIFIER, tails=("out.txt",))
    assert {name: read.get() for name, read in found.items()} == {
        "reward.json": None,
        "reward.txt": b"1\n",
        "reward-details.json": b"{}",
        "out.txt": b"6789",
    }
    assert [path for path, _ in sandbox.reads] == ["/v"]
    empty = CountingSandbox({})
    assert all(read.get() is None for read in empty.read_engine_files("/v", VERIFIER).values())
    assert [path for path, _ in empty.reads] == []  # no folder, nothing in it


def test_read_engine_files_answer_oversized_files_from_their_size():
    sandbox = CountingSandbox({"/v/reward.txt": b"1" * 101, "/v/out.txt": b"x" * 5})
    found = sandbox.read_engine_files("/v", VERIFIER)
    for name, size, limit in (("reward.txt", 101, 100), ("out.txt", 5, 4)):
        with pytest.raises(
            TooLargeError, match=f"/v/{name} is {size} bytes, over the limit of {limit}"
        ):
            found[name].get()
    assert [path for path, _ in sandbox.reads] == ["/v"]


def test_read_engine_files_stop_at_a_huge_other_file_and_read_the_rest_one_by_one():
    huge = FOLDER_SKIP_BYTES + 1
    sandbox = CountingSandbox(
        {"/v/a-huge.log": b"x" * huge, "/v/reward.txt": b"0.5", "/v/out.txt": b"0123456789"}
    )
    found = sandbox.read_engine_files("/v", VERIFIER, tails=("out.txt",))
    assert (found["reward.txt"].get(), found["out.txt"].get()) == (b"0.5", b"6789")
    assert found["reward.json"].get() is None
    assert sandbox.taken("/v") < 1 << 16  # left at the huge file's header, not read through
    # the names the folder read left open, each on its own (the absent ones hold no archive)
    assert {path for path, _ in sandbox.reads} == {"/v", "/v/reward.txt", "/v/out.txt"}


def test_read_engine_files_of_a_file_not_a_folder_read_each_name():
    sandbox = CountingSandbox({"/v": b"a file"})
    found = sandbox.read_engine_files("/v", {"reward.txt": 100})
    assert found["reward.txt"].get() is None
    assert [path for path, _ in sandbox.reads] == ["/v"]


def test_export_path_copies_a_folder_within_its_budget():
    sandbox = MemorySandbox(Recorder(), files={"/out/a": b"aaa", "/out/sub/b": b"bb"})
    target = io.BytesIO()
    assert sandbox.export_path("/out", target, budget=5)
    target.seek(0)
    with tarfile.open(fileobj=target) as archive:
        assert sorted(archive.getnames()) == ["out", "out/a", "out/sub/b"]
        assert all(member.uid == 0 for member in archive.getmembers())
    assert not sandbox.export_path("/none", io.BytesIO(), budget=5)
    with pytest.raises(TooLargeError):
        sandbox.export_path("/out", io.BytesIO(), budget=4)


# -- the confined file actions as the base class runs them (a real backend's path) -------------


def test_a_file_action_is_one_run_of_the_helper_as_the_agent():
    handler = Recorder(ExecResult(0, "\ufffd", raw=b"hel\xfflo"))
    sandbox = MemorySandbox(handler, workdir="/app")
    assert Sandbox.read_file(sandbox, "f", max_bytes=4, user="agent") == (b"hel\xff", True)
    assert [call[:2] for call in handler.calls] == [
        (shlex.join([helper.HELPER, "file", "read", "/app", "/app/f", "5"]), "agent")
    ]
    handler = Recorder(default=ExecResult(0, "/real/app/d/new\n"))
    sandbox = MemorySandbox(handler, workdir="/app")
    assert Sandbox.write_file(sandbox, "d/new", b"x") == "/real/app/d/new"
    assert Sandbox.list_dir(sandbox, "/app/d") == "/real/app/d/new\n"
    assert [call[0].split()[1:] for call in handler.calls] == [
        ["file", "write", "/app", "/app/d/new"],
        ["file", "list", "/app", "/app/d"],
    ]


def test_a_path_leaving_the_workdir_lexically_runs_nothing():
    handler = Recorder()
    with pytest.raises(PathEscapeError, match="outside the working directory"):
        Sandbox.read_file(MemorySandbox(handler, workdir="/app"), "../etc/passwd", max_bytes=1)
    assert handler.calls == []


@pytest.mark.parametrize(
    ("code", "output", "error", "message"),
    [
        (3, "/etc/passwd\n", PathEscapeError, "'f' resolves to /etc/passwd, outside the"),
        (4, "", SandboxError, "f: no such file or folder"),
        (5, "", SandboxError, "f: is a directory"),
        (6, "", SandboxError, "f: not a regular file"),
        (1, "Permission denied\n", SandboxError, "f: Permission denied"),
        (None, "", SandboxError, "f: read timed out"),
    ],
)
def test_file_action_errors_name_the_path(
    code: int | None, output: str, error: type[Exception], message: str
):
    sandbox = MemorySandbox(Recorder(ExecResult(code, output)), workdir="/app")
    with pytest.raises(error, match=message):
        Sandbox.read_file(sandbox, "f", max_bytes=10)


def test_a_read_whose_answer_was_cut_is_an_error():
    sandbox = MemorySandbox(Recorder(ExecResult(0, "x" * 5000)), workdir="/app")
    with pytest.raises(SandboxError, match="its answer was cut"):
        Sandbox.read_file(sandbox, "f", max_bytes=10, channel=False)


# -- the fake's own file actions, as tests of code above the interface use them -----------------


def test_the_fake_keeps_its_files_confined_to_the_workdir():
    sandbox = MemorySandbox(Recorder(), workdir="/app", files={"/app/d/a.txt": b"abc"})
    assert sandbox.write_file("d/new.txt", b"new") == "/app/d/new.txt"
    assert sandbox.read_file("d/new.txt", max_bytes=2) == (b"ne", True)
    assert sandbox.list_dir("d") == "a.txt\nnew.txt\n"
    with pytest.raises(SandboxError, match="is a directory"):
        sandbox.read_file("/app/d", max_bytes=10)
    with pytest.raises(PathEscapeError):
        sandbox.write_file("../etc/passwd", b"")
    with pytest.raises(PathEscapeError):
        sandbox.read_file("/etc/passwd", max_bytes=10)
    sandbox.remove()
    assert not sandbox.is_running()


def check(retries: int = 3, start_period_sec: float = 0.0) -> HealthcheckConfig:
    return HealthcheckConfig(
        command="curl -f localhost",
        interval_sec=0,
        timeout_sec=5,
        start_period_sec=start_period_sec,
        start_interval_sec=0,
        retries=retries,
    )


def test_healthcheck_retries_until_it_passes():
    failed = ExecResult(1, "refused")
    handler = Recorder(failed, failed)
    MemorySandbox(handler).healthcheck(check(), user="agent", where="t/task.toml: [x]")
    assert [(call[0], call[1]) for call in handler.calls] == [("curl -f localhost", "agent")] * 3


def test_healthcheck_fails_after_its_retries_in_a_row_past_the_start_period():
    handler = Recorder(default=ExecResult(7, "connection refused\n"))
    with pytest.raises(SandboxError) as raised:
        MemorySandbox(handler).healthcheck(check(retries=2), user=None, where="t/task.toml: [x]")
    assert str(raised.value) == (
        "t/task.toml: [x] failed 2 times in a row: 'curl -f localhost'"
        " (last output: 'connection refused')"
    )
    assert len(handler.calls) == 2


def test_copy_tree_streams_a_folder_into_another_sandbox_within_its_budget():
    source = MemorySandbox(Recorder(), files={"/app/a.txt": b"hi", "/app/d/b.txt": b"x" * 5000})
    target = MemorySandbox(Recorder())
    assert source.copy_tree("/app", target, budget=1 << 20)
    assert target.files == {"/app/a.txt": b"hi", "/app/d/b.txt": b"x" * 5000}
    assert not source.copy_tree("/gone", target, budget=1 << 20)
    with pytest.raises(TooLargeError, match="/app is over 4096 bytes"):
        source.copy_tree("/app", MemorySandbox(Recorder()), budget=4096)


class Stamped(MemorySandbox):
    """A sandbox whose engine reads /logs/artifacts' modification time from ``mtime``."""

    mtime: str | None = "t0"

    def engine_mtime(self, path: str) -> str | None:
        return self.mtime if path == "/logs/artifacts" else None


def test_artifacts_are_untouched_while_their_folders_mtime_is_set_ups():
    empty = Stamped(Recorder(ExecResult(0, "/app\n/app\nempty\n")))
    empty.prepare(None)
    assert empty.artifacts_untouched()
    empty.mtime = "t1"  # an entry was added, removed or renamed there
    assert not empty.artifacts_untouched()
    held = Stamped(Recorder(ExecResult(0, "/app\n/app\n")))  # the image brought files there
    held.prepare(None)
    assert not held.artifacts_untouched()
    plain = MemorySandbox(Recorder(ExecResult(0, "/app\n/app\nempty\n")))
    plain.prepare(None)
    assert not plain.artifacts_untouched()  # a backend that cannot tell
