"""A fake of the sandbox methods an episode calls, for unit tests without Docker.

It answers exec, exec_root, stop_processes, mark_baseline, put_dir, confine, read_file,
write_file, list_dir, read_engine_file and remove on a dict of files, and records each call. Its
verifier (any command running /tests/test.sh) writes reward 1 when a solve.sh ran since the last
grading, else 0.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from harbor_openenv.sandbox import ExecResult, TooLargeError, resolve_within


class FakeSandbox:
    """The sandbox methods an episode uses, on a dict of files; records what was asked."""

    def __init__(self, workdir: str = "/work") -> None:
        self.workdir = workdir
        self.default_user = ""
        self.exceeded: str | None = None
        self.files: dict[str, bytes] = {}
        self.calls: list[tuple[str, Any]] = []
        self.solved = False
        self.removed = 0
        self.fail_on: str | None = None  # a command substring whose exec raises
        self.answers: dict[str, ExecResult] = {}  # a command substring's fixed result

    @property
    def name(self) -> str:
        return "fake"

    def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        max_output: int,
        user: str | None = None,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        args: tuple[str, ...] = (),
    ) -> ExecResult:
        self.calls.append(("exec", (command, user, dict(env or {}))))
        if self.fail_on and self.fail_on in command:
            raise RuntimeError(f"the engine broke on {command!r}")
        for part, result in self.answers.items():
            if part in command:
                return result
        if "/solution/solve.sh" in command:
            self.solved = True
            self.files["/logs/agent/oracle.txt"] = b"solved\n"
        elif "/tests/test.sh" in command:
            reward = b"1" if self.solved else b"0"
            self.files["/logs/verifier/reward.txt"] = reward
            self.files["/logs/verifier/test-stdout.txt"] = b"graded " + reward
            self.solved = False
        elif command.startswith("echo "):
            return ExecResult(0, command[5:] + "\n")
        return ExecResult(0, "")

    def exec_root(
        self, script: str, *args: str, workdir: str = "/", timeout_s: float = 60
    ) -> ExecResult:
        self.calls.append(("exec_root", (script, args)))
        return ExecResult(0, "")

    def stop_processes(self, prepare: tuple[str, str, str, str] | None = None) -> None:
        self.calls.append(("stop_processes", prepare))

    def mark_baseline(self) -> None:
        self.calls.append(("mark_baseline", None))

    def put_dir(
        self,
        source: Path,
        destination: str,
        *,
        replace: bool = True,
        prepared: bool = False,
        executable: str | None = None,
    ) -> None:
        self.calls.append(("put_dir", (source, destination)))

    def confine(self, path: str, *, user: str | None = None) -> str:
        return resolve_within(self.workdir, path)

    def read_file(
        self, path: str, *, max_bytes: int, user: str | None = None
    ) -> tuple[bytes, bool]:
        data = self.files[path]
        return data[:max_bytes], len(data) > max_bytes

    def write_file(self, path: str, data: bytes, *, user: str | None = None) -> None:
        self.calls.append(("write_file", (path, user)))
        self.files[path] = data

    def list_dir(self, path: str, *, user: str | None = None) -> str:
        prefix = path.rstrip("/") + "/"
        return "\n".join(sorted(posixpath.basename(p) for p in self.files if p.startswith(prefix)))

    def read_engine_file(self, path: str, *, limit: int, tail: bool = False) -> bytes | None:
        data = self.files.get(path)
        if data is None:
            return None
        if len(data) > limit and not tail:
            raise TooLargeError(f"{path} is {len(data)} bytes, over the limit of {limit}")
        return data[-limit:] if tail else data

    def remove(self) -> None:
        self.removed += 1

    def called(self, name: str) -> list[Any]:
        return [args for called, args in self.calls if called == name]
