"""``check`` and its engine: a no-op and an oracle episode of every runnable task, in Docker.

Both episodes of each task run through :func:`~harbor_openenv.client.driver.run_episode` on one
in-process ``Runtime`` (no server), ``jobs`` at once; the containers go even on Ctrl-C or SIGTERM.
Needs only the core package to import; running a check imports the server extra.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from harbor_openenv.cli.common import (
    EXIT_OK,
    EXIT_PROBLEMS,
    SERVER_EXTRA,
    UsageError,
    open_dataset,
    print_table,
    server_settings,
)
from harbor_openenv.config import Settings
from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.task import Task, TaskKind

if TYPE_CHECKING:
    from harbor_openenv.episode.runtime import Runtime


class CheckError(HarborOpenEnvError):
    """Why a check cannot start (an unknown task, no server extra, no engine): one line."""


@dataclass
class CheckResult:
    """One task's two episodes (``seconds`` adds both up); ``problems`` are dataset bugs."""

    task: str
    nop: float | None = None
    oracle: float | None = None
    nop_error: str | None = None
    oracle_error: str | None = None
    seconds: float = 0.0
    ok: bool = False
    problems: list[str] = field(default_factory=list)
    # The tamper report of the oracle's changes (every step's, added up): paths per class.
    oracle_changes: dict[str, int] = field(default_factory=dict)
    oracle_suspect: list[str] = field(default_factory=list)  # the first suspect paths
    warnings: list[str] = field(default_factory=list)

    def judge(self) -> None:
        """Fill ``problems`` and ``ok`` from the two rewards."""
        if self.oracle is None:
            self.problems.append(
                f"{self.task}: the oracle episode has no reward: {self.oracle_error}"
            )
        elif self.oracle < 1.0:
            detail = f" ({self.oracle_error})" if self.oracle_error else ""
            self.problems.append(
                f"{self.task}: the oracle scored {self.oracle:g}, not 1.0: solution/solve.sh does"
                f" not solve the task{detail}"
            )
        if self.nop is None:
            self.problems.append(f"{self.task}: the no-op episode has no reward: {self.nop_error}")
        elif self.nop >= 1.0:
            self.problems.append(
                f"{self.task}: the no-op episode scored {self.nop:g}: the verifier passes without"
                " the task being done"
            )
        self.ok = not self.problems
        if self.oracle_suspect:
            classes = ", ".join(f"{name} {n}" for name, n in self.oracle_changes.items() if n)
            self.warnings.append(
                f"{self.task}: the oracle's own changes look like tampering to the tamper report"
                f" ({classes}: {', '.join(self.oracle_suspect)}): a trainer that drops suspect"
                " rollouts drops this task's honest solutions too"
            )


def tamper_of(info: dict[str, Any]) -> tuple[dict[str, int], list[str]]:
    """An episode's tamper reports (a multi-step task's per step) added up: the count per class
    (``CLASS_deleted`` for deleted paths), and the first suspect paths."""
    from harbor_openenv.episode import tamper

    counts: dict[str, int] = {}
    suspect: list[str] = []
    for step in info.get("steps") or [info]:
        report = step.get("tamper") or {}
        # Deleted paths count apart, as the metric's ``CLASS_deleted`` kinds do.
        for part, suffix in ((report, ""), (report.get("deleted") or {}, "_deleted")):
            for name, count in (part.get("counts") or {}).items():
                counts[name + suffix] = counts.get(name + suffix, 0) + count
                if name in tamper.SUSPECT and count:
                    suspect += (part.get("paths") or {}).get(name, [])
    return counts, list(dict.fromkeys(suspect))[: tamper.SHOWN]


def select_tasks(
    dataset: Dataset, wanted: list[str] | None
) -> tuple[list[Task], list[CheckResult]]:
    """Runnable tasks to check, and failed results for invalid tasks and named ones that cannot run.

    Other text-only and unsupported tasks are skipped: validate does not fail them either.
    """
    if wanted:
        unknown = [task_id for task_id in wanted if task_id not in dataset]
        if unknown:
            raise CheckError(f"{dataset.root}: no task {unknown[0]!r} in this dataset")
        tasks = [dataset[task_id] for task_id in dict.fromkeys(wanted)]
    else:
        tasks = list(dataset)
    runnable, refused = [], []
    for task in tasks:
        if task.kind is TaskKind.RUNNABLE:
            runnable.append(task)
        elif wanted or task.kind is TaskKind.INVALID:
            why = "; ".join(task.problems) or "nothing to run in a container"
            refused.append(CheckResult(task.id, problems=[f"{task.id}: is {task.kind}: {why}"]))
        else:
            print(f"skipped {task.id} ({task.kind})", file=sys.stderr)
    return runnable, refused


def check_in_docker(
    root: Path, tasks: list[Task], jobs: int, build_network: str | None
) -> list[CheckResult]:
    """Check ``tasks`` on one in-process runtime; its containers go even on Ctrl-C or SIGTERM.

    ``build_network`` is the server setting of that name (a check builds images as the server
    does); every other setting is the server's default.
    """
    try:
        from harbor_openenv.episode.runtime import Runtime
    except ImportError as exc:
        raise CheckError(
            f"check needs the server extra ({exc.name} is missing): {SERVER_EXTRA}"
        ) from None
    from harbor_openenv.events import configure_images

    configure_images()  # image builds log their start and each step; check would be silent
    token = secrets.token_urlsafe(16)
    from harbor_openenv.images.lock import LockError

    try:
        runtime = Runtime(root, Settings(orchestration_token=token, build_network=build_network))
    except LockError as exc:
        raise CheckError(str(exc)) from None
    try:
        runtime.backend.ping()
    except Exception as exc:
        raise CheckError(f"cannot reach the Docker engine: {exc}") from None
    checker = _Checker(runtime, token)
    try:
        with _interruptible():
            return _run_checks(checker, tasks, jobs)
    finally:
        checker.stop.set()
        runtime.shutdown()


class _Progress:
    """One updating line on a terminal; a line per finished task otherwise (CI logs)."""

    def __init__(self, total: int, out: TextIO = sys.stderr) -> None:
        self.total, self.done, self.failed = total, 0, 0
        self._out = out
        self._tty = out.isatty()
        self._started = time.monotonic()

    def update(self, result: CheckResult) -> None:
        self.done += 1
        self.failed += not result.ok
        elapsed = time.monotonic() - self._started
        line = (
            f"checked {self.done}/{self.total} ({self.failed} with problems, {elapsed:.0f} s)"
            f" {result.task}: {'ok' if result.ok else 'PROBLEM'}"
        )
        if self._tty:
            self._out.write("\r\033[K" + line)
        else:
            self._out.write(line + "\n")
        self._out.flush()

    def finish(self) -> None:
        if self._tty and self.done:
            self._out.write("\r\033[K")
            self._out.flush()


class _Checker:
    """Runs episodes on one ``Runtime``; stops starting new work once ``stop`` is set."""

    def __init__(self, runtime: Runtime, token: str) -> None:
        self.runtime = runtime
        self.token = token
        self.stop = threading.Event()

    def episode(
        self, task_id: str, oracle: bool
    ) -> tuple[float | None, str | None, float, dict[str, Any]]:
        """One episode, every step of a multi-step task included: its reward, what went wrong
        (if anything), how long it took and the last observation's info."""
        from harbor_openenv.client import driver
        from harbor_openenv.server.environment import HarborEnvironment

        started = time.monotonic()
        env = HarborEnvironment(self.runtime)
        policy = driver.oracle(self.token) if oracle else driver.nop
        reward: float | None
        error: str | None
        info: dict[str, Any] = {}
        try:
            run = driver.run_episode(env, task_id, policy, self.token, stop=self.stop)
            reward, error = run.reward, run.error
            info = run.last.info if run.last is not None else {}
        except Exception as exc:  # the engine failing must not stop the other tasks
            reward, error = None, f"{type(exc).__name__}: {exc}"
        finally:
            env.close()
        return reward, error, time.monotonic() - started, info


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt meanwhile (main thread only), whatever the
    process inherited: a shell starts background commands with SIGINT ignored, Python then leaves
    it ignored, and a Ctrl-C (or a CI runner's SIGINT) would leave the check running to its end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _run_checks(checker: _Checker, tasks: list[Task], jobs: int) -> list[CheckResult]:
    """Both episodes of every task on ``jobs`` workers; containers go even on Ctrl-C."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    pending = {task.id: CheckResult(task.id) for task in tasks}
    halves = dict.fromkeys(pending, 0)
    progress = _Progress(len(tasks))
    results = []
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="check")
    try:
        futures = {
            pool.submit(checker.episode, task.id, oracle): (task.id, oracle)
            for task in tasks
            for oracle in (False, True)
        }
        for future in as_completed(futures):
            task_id, oracle = futures[future]
            reward, error, seconds, info = future.result()
            result = pending[task_id]
            if oracle:
                result.oracle, result.oracle_error = reward, error
                result.oracle_changes, result.oracle_suspect = tamper_of(info)
            else:
                result.nop, result.nop_error = reward, error
            result.seconds = round(result.seconds + seconds, 2)
            halves[task_id] += 1
            if halves[task_id] == 2:
                result.judge()
                results.append(result)
                progress.update(result)
    except BaseException:
        checker.stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        checker.runtime.shutdown()  # running episodes fail fast once their containers are gone
        raise
    finally:
        progress.finish()
        pool.shutdown(wait=True)
    return results


# -- the command -----------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {args.jobs}")
    if args.json not in (None, "-") and not Path(args.json).parent.is_dir():
        raise UsageError(f"--json {args.json}: its folder does not exist")
    dataset = open_dataset(args.dataset)
    try:
        tasks, results = select_tasks(dataset, args.task)
        started = time.monotonic()
        if tasks:
            # The server's defaults, but for the build network (a check builds images as the
            # server does).
            build_network = server_settings().build_network
            results += check_in_docker(dataset.root, tasks, args.jobs, build_network)
    except CheckError as exc:
        raise UsageError(str(exc)) from None
    order = {task_id: index for index, task_id in enumerate(dataset.ids)}
    results.sort(key=lambda result: order[result.task])
    _report_check(results, args.json, time.monotonic() - started)
    return EXIT_OK if all(result.ok for result in results) else EXIT_PROBLEMS


def _reward_text(value: float | None) -> str:
    return "None" if value is None else f"{value:g}"


def _changes_text(result: CheckResult) -> str:
    """The CHANGES column: the oracle's changes outside its workdir by class, suspect first."""
    counts = {name: n for name, n in result.oracle_changes.items() if n}
    if not counts:
        return "-"
    text = ", ".join(f"{name} {n}" for name, n in counts.items())
    return f"SUSPECT {text}" if result.oracle_suspect else text


def _report_check(results: list[CheckResult], json_target: str | None, seconds: float) -> None:
    out = sys.stderr if json_target == "-" else sys.stdout
    if results:
        table = [["TASK", "NOP", "ORACLE", "SECONDS", "STATUS", "CHANGES"]]
        table += [
            [
                r.task,
                _reward_text(r.nop),
                _reward_text(r.oracle),
                f"{r.seconds:.1f}",
                "ok" if r.ok else "PROBLEM",
                _changes_text(r),
            ]
            for r in results
        ]
        print_table(table, out)
    problems = [line for r in results for line in r.problems]
    for line in problems:
        print(line, file=out)
    for line in (line for r in results for line in r.warnings):
        print(f"warning: {line}", file=out)
    failed = sum(not r.ok for r in results)
    suspect = sum(bool(r.oracle_suspect) for r in results)
    print(
        f"{len(results)} tasks checked in {seconds:.1f} s: {len(results) - failed} ok,"
        f" {failed} with problems; the tamper report flagged {suspect} oracle runs",
        file=out,
    )
    if json_target:
        text = json.dumps([asdict(r) for r in results], indent=2) + "\n"
        if json_target == "-":
            sys.stdout.write(text)
        else:
            Path(json_target).write_text(text, encoding="utf-8")
