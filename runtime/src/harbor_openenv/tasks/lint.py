"""The lint Harbor lacks: where a task's ``test.sh`` runs something the agent can shadow.

The verifier runs in the agent's container and, unless it changes folder, in the agent's working
directory, which the agent writes. There ``python -m X`` puts that folder first on ``sys.path``
(an ``X.py`` the agent leaves there is imported instead, ``pytest.py`` included), ``pytest`` reads
the folder's ``conftest.py`` and its ini files (``pytest.ini``, ``pyproject.toml``, ``tox.ini``,
``setup.cfg``: ``-p`` plugins, ``addopts``), a script run by a relative path is the agent's to
rewrite, and a ``PATH`` entry inside the folder lets the agent's programs win. Each finding names
the file and line; none changes how a task runs. A line-by-line reading of the script (``cd``
tracked as far as it names a folder plainly), so it flags what it sees, not every way a shell can
reach the same.

A second reading (:func:`system_state`) names the lines that read the system rather than the
task's files: paths under ``/etc``, ``/usr``, ``/proc``, ``/var`` ... and the commands that list
installed packages, services or processes. Such a verifier checks what the agent changed outside
its working directory, which a pristine verifier (``HARBOR_OPENENV_PRISTINE_VERIFIER``) never
sees: keep the task in shared mode."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from .config import DatasetError
from .task import Task

_PYTHON_M = re.compile(r"(?:^|[\s;&|(])(python[0-9.]*)\s+(?:-\w+\s+)*-m\s+([\w.]+)")
_PYTEST = re.compile(r"(?:^|[\s;&|(])(pytest|py\.test)(?=\s|$|;|&|\|)")
_RELATIVE = re.compile(
    r"(?:^|[;&|(]\s*|\s(?:bash|sh|source|\.)\s+|python[0-9.]*\s+)(\./[^\s;&|)]+|[\w-]+\.(?:sh|py))"
)
_PATH_SET = re.compile(r"(?:^|[\s;&|(])(?:export\s+)?PATH=([^\s;&|]+)")
_CD = re.compile(r"(?:^|[\s;&|(])cd(?:\s+([^\s;&|)]+))?")
_SYSTEM_PATH = re.compile(
    r"(?<![\w./$-])(/(?:etc|usr|proc|sys|var|opt|srv|root|home|run|lib|lib64)(?:/[^\s;&|)'\"`]*)?)"
)
_SYSTEM_COMMAND = re.compile(
    r"(?:^|[\s;&|(`])(dpkg(?:-query)?\s+-[lsLS]\w*|apt(?:-get)?\s+list|pip[0-9.]*\s+(?:list|show"
    r"|freeze)|-m\s+pip\s+(?:list|show|freeze)|systemctl|service\s+\S+\s+status|pgrep|ps"
    r"\s+-?\w*[aex]|ss\s+-\w*[lt]|netstat|getent|id\s+-\w+|crontab\s+-l)(?=\s|$|;|&|\||\))"
)
_PROGRAM_DIRS = ("/bin/", "/sbin/")  # a program run by its path, not state read
_WORKDIR_LINE = re.compile(r"^\s*WORKDIR\s+(\S+)", re.I | re.M)


def workdir_of(task: Task) -> str | None:
    """The agent's working directory as the task states it: ``[environment].workdir``, else the
    Dockerfile's last ``WORKDIR`` (None: not known from the files)."""
    try:
        configured = task.config.environment.workdir
    except DatasetError:
        return None
    if configured:
        return configured.rstrip("/") or "/"
    dockerfile = task.path / "environment" / "Dockerfile"
    try:
        found = _WORKDIR_LINE.findall(dockerfile.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return found[-1].strip("\"'").rstrip("/") or "/" if found else None


def shadowing(task: Task) -> list[dict[str, str]]:
    """Every line of the task's (and its steps') ``test.sh`` that runs something the agent can
    shadow from the working directory: ``{"file", "line", "warning"}``."""
    workdir = workdir_of(task)
    found = []
    for script in _scripts(task):
        relative = script.relative_to(task.path).as_posix()
        found += [
            {"file": relative, "line": str(number), "warning": warning}
            for number, warning in _read(script, workdir)
        ]
    return found


def system_state(task: Task) -> list[dict[str, str]]:
    """Every line of the task's (and its steps') ``test.sh`` that reads the system outside the
    task's own files (``/tests``, ``/logs``, ``/solution``, ``/tmp``, the working directory):
    ``{"file", "line", "warning"}``."""
    workdir = workdir_of(task)
    found = []
    for script in _scripts(task):
        relative = script.relative_to(task.path).as_posix()
        text = script.read_text(encoding="utf-8", errors="replace")
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
            read = [
                path
                for path in _SYSTEM_PATH.findall(line)
                if not any(part in path for part in _PROGRAM_DIRS)
                and not (workdir and workdir != "/" and _is_workdir(path, workdir))
            ]
            read += [" ".join(command.split()) for command in _SYSTEM_COMMAND.findall(line)]
            if read:
                shown = ", ".join(dict.fromkeys(read))
                warning = (
                    f"reads the system ({shown}): what the agent changed there decides the"
                    " reward, which a pristine verifier never sees (keep it shared)"
                )
                found.append({"file": relative, "line": str(number), "warning": warning})
    return found


def _scripts(task: Task) -> list[Path]:
    """The task's and its steps' ``test.sh`` that exist."""
    scripts = [task.tests_dir() / "test.sh"]
    try:
        steps = task.config.steps or []
    except DatasetError:
        steps = []
    scripts += [task.tests_dir(step) / "test.sh" for step in steps]
    return [script for script in scripts if script.is_file()]


def _read(script: Path, workdir: str | None) -> list[tuple[int, str]]:
    """(line number, warning) pairs of one script; it starts in the working directory."""
    where = workdir or "the working directory"
    inside = True
    found = []
    text = script.read_text(encoding="utf-8", errors="replace")
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        for match in _CD.finditer(line):
            inside = _is_workdir(match.group(1), workdir)
        for entry in _PATH_SET.findall(line):
            parts = entry.strip("\"'").split(":")
            if any(_is_workdir(part, workdir) or part in (".", "") for part in parts):
                found.append((number, f"PATH gets a folder the agent writes ({entry})"))
        if not inside:
            continue
        for python, module in _PYTHON_M.findall(line):
            found.append(
                (
                    number,
                    f"{python} -m {module} runs with {where} first on sys.path: a"
                    f" {module.split('.')[0]}.py the agent leaves there is imported instead",
                )
            )
        if _PYTEST.search(line) and not _PYTHON_M.search(line):
            found.append(
                (
                    number,
                    f"pytest runs in {where}: the agent's conftest.py, pytest.ini, tox.ini,"
                    " setup.cfg or pyproject.toml there can change what it runs",
                )
            )
        for path in _RELATIVE.findall(line):
            found.append((number, f"{path} is run from {where}, where the agent can rewrite it"))
    return found


def _is_workdir(path: str | None, workdir: str | None) -> bool:
    """Whether a ``cd`` (or PATH) target is the working directory (or inside it)."""
    if path is None:
        return False  # cd alone: home
    try:
        words = shlex.split(path)
    except ValueError:
        return False
    target = (words[0] if words else "").rstrip("/") or "/"
    if target in ("$PWD", "${PWD}", ".") or target.startswith(("$PWD/", "./")):
        return True
    if workdir is None or target == "/":
        return workdir == "/"
    return target == workdir or target.startswith(workdir + "/")
