"""A recording sandbox for the episode and verifier unit tests, on :class:`MemorySandbox`.

Commands run nowhere: the verifier (any command running /tests/test.sh) writes reward 1 when a
solve.sh ran since the last grading, else 0; ``answers`` fixes a command's result, ``fail_on``
makes one raise. The helper-backed steps (stop_processes, mark_baseline, put_dir, exec_root) are
recorded and succeed; ``called(name)`` lists what each was asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harbor_openenv.sandbox import ExecResult
from harbor_openenv.sandbox.base import VerifierDirs
from harbor_openenv.sandbox.memory import MemorySandbox


class FakeSandbox(MemorySandbox):
    """MemorySandbox's files and shared behaviour; records what the episode asked."""

    def __init__(self, workdir: str = "/work") -> None:
        super().__init__(self._answer, workdir=workdir)
        self.calls: list[tuple[str, Any]] = []
        self.solved = False
        self.removals = 0
        self.fail_on: str | None = None  # a command substring whose exec raises
        self.answers: dict[str, ExecResult] = {}  # a command substring's fixed result

    def _answer(self, command: str, user: str, env: object, workdir: str) -> ExecResult:
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

    def exec(self, command: str, **options: Any) -> ExecResult:
        user, env = options.get("user"), dict(options.get("env") or {})
        self.calls.append(("exec", (command, user, env)))
        return super().exec(command, **options)

    def exec_root(
        self, script: str, *args: str, workdir: str = "/", timeout_s: float = 60
    ) -> ExecResult:
        self.calls.append(("exec_root", (script, args)))
        return ExecResult(0, "")

    def stop_processes(self, prepare: VerifierDirs | None = None) -> None:
        self.calls.append(("stop_processes", prepare))

    def mark_baseline(self) -> list[int]:
        self.calls.append(("mark_baseline", None))
        return []

    def put_dir(self, source: Path, destination: str, **options: Any) -> None:
        self.calls.append(("put_dir", (source, destination)))

    def write_file(
        self, path: str, data: bytes, *, user: str | None = None, channel: bool = False
    ) -> str:
        self.calls.append(("write_file", (path, user)))
        return super().write_file(path, data, user=user, channel=channel)

    def remove(self) -> None:
        self.removals += 1
        super().remove()

    def called(self, name: str) -> list[Any]:
        return [args for called, args in self.calls if called == name]
