"""Is a runtime pin there? Checked when the pin is given (``copier copy``, ``harbor-openenv
update -d runtime_pin=...``), so that a version nobody published is one line then, not the next
``uv run``'s failure.

A requirement (``harbor-openenv==X.Y.Z``, a range) is looked up in ``wheels/`` first and then on
the package index uv is configured with (``uv pip compile --no-deps``: uv's own index settings,
``UV_INDEX_URL`` and its config files), or the one ``HARBOR_OPENENV_PIN_INDEX_URL`` names; a git
pin with ``git ls-remote``; a wheel pin is a file.
When the index or the git host cannot be reached (offline), or uv is missing, the pin is kept and
:func:`check_pin` says that it could not be checked. Standard library only: the copy task imports
this module on copier's Python.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from harbor_openenv.errors import HarborOpenEnvError

# harbor_openenv-VERSION[-BUILD]-PYTHON-ABI-PLATFORM.whl (PEP 427)
WHEEL_NAME = re.compile(
    r"harbor_openenv-(?P<version>[0-9][^-/]*)(-[0-9][^-/]*)?-[^-/]+-[^-/]+-[^-/]+\.whl"
)
GIT_PIN = re.compile(
    r"harbor[-_.]openenv *@ *git\+(?P<url>(https|ssh|http|file)://[^\s#]+)@(?P<ref>[^@/#\s]+)"
    r"#subdirectory=runtime"
)
TIMEOUT_S = 60.0


class PinError(HarborOpenEnvError):
    """The pin names a runtime that is not there; the message says which and what to do."""


def _unchecked(why: str) -> str:
    return f"runtime_pin could not be checked ({why}); the first `uv run` or image build will tell"


def check_pin(pin: str, wheels: Path | None = None, timeout_s: float = TIMEOUT_S) -> str | None:
    """None when ``pin`` was found; a note when it could not be checked; PinError when it is not
    there. ``wheels``: the folder searched before the index (the environment's ``wheels/``)."""
    pin = pin.strip()
    if not pin:
        return None
    if pin.endswith(".whl"):
        _check_wheel(pin)
        return None
    found = GIT_PIN.fullmatch(pin)
    if found:
        return _check_git(pin, found.group("url"), found.group("ref"), timeout_s)
    return _check_requirement(pin, wheels, timeout_s)


def _check_wheel(pin: str) -> None:
    path = Path(pin).expanduser()
    if not WHEEL_NAME.fullmatch(path.name):
        raise PinError(
            f"runtime_pin {pin}: not a harbor-openenv wheel's file name"
            " (harbor_openenv-VERSION-py3-none-any.whl, as python -m build --wheel runtime makes)"
        )
    if not path.is_file():
        raise PinError(
            f"runtime_pin {pin}: wheel file not found (build one with: python -m build --wheel"
            " runtime)"
        )


def _compile(pin: str, extra: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    uv = shutil.which("uv")
    assert uv
    index = os.environ.get("HARBOR_OPENENV_PIN_INDEX_URL")
    if index and "--no-index" not in extra:
        extra = ["--index-url", index, *extra]
    return subprocess.run(
        [uv, "pip", "compile", "--no-deps", "--no-header", "--quiet", *extra, "-"],
        input=pin + "\n",
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _check_requirement(pin: str, wheels: Path | None, timeout_s: float) -> str | None:
    if not shutil.which("uv"):
        return _unchecked("uv is not installed")
    links = wheels is not None and any(wheels.glob("harbor_openenv-*.whl"))
    find_links = ["--find-links", str(wheels)] if links and wheels else []
    try:
        if find_links and _compile(pin, ["--no-index", *find_links], timeout_s).returncode == 0:
            return None
        result = _compile(pin, find_links, timeout_s)
    except subprocess.TimeoutExpired:
        return _unchecked(f"the package index did not answer within {timeout_s:g} s")
    if result.returncode == 0:
        return None
    output = result.stderr + result.stdout
    if result.returncode == 1 and "unsatisfiable" in output:  # uv's answer: no such version
        where = "on the package index" + (" nor in wheels/" if links else "")
        raise PinError(
            f"runtime_pin {pin}: no harbor-openenv release matches it {where}: give a published"
            " version, or leave the pin blank for this template's own"
        )
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return _unchecked(f"the package index could not be reached: {lines[-1] if lines else '?'}")


def _check_git(pin: str, url: str, ref: str, timeout_s: float) -> str | None:
    if not shutil.which("git"):
        return _unchecked("git is not installed")
    if re.fullmatch(r"[0-9a-f]{7,40}", ref):  # a commit: ls-remote lists refs only
        return _unchecked(f"{ref} looks like a commit, which git ls-remote cannot look up")
    try:
        result = subprocess.run(
            ["git", "ls-remote", "--", url, ref, f"refs/tags/{ref}", f"refs/heads/{ref}"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
    except subprocess.TimeoutExpired:
        return _unchecked(f"{url} did not answer within {timeout_s:g} s")
    if result.returncode == 0 and result.stdout.strip():
        return None
    if result.returncode == 0:
        raise PinError(f"runtime_pin {pin}: {url} has no branch or tag {ref}")
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else f"git ls-remote exited {result.returncode}"
    if re.search(r"resolve host|unable to access|timed out|Connection refused|network", last):
        return _unchecked(f"{url} could not be reached: {last}")
    raise PinError(f"runtime_pin {pin}: {url} is not a git repository git can read: {last}")
