"""`python3 scripts/copy` (README.md's render command): every answer mistake is one line.

copier itself answers a refused ``-d`` answer with a traceback of 41 to 49 lines (a validator's
ValueError, or ``int()``'s for ``-d port=abc``, which names no question). Through scripts/copy
each is one line naming the answer and what is allowed, exit status 2, and nothing is written.
A runtime pin is looked up when it is given: here on a local package index where harbor-openenv
0.1.0 and 0.2.0 are published (``fake_package_index``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _template_helpers import REPO, commit_all, fake_package_index, git

SCRIPT = REPO / "scripts" / "copy"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A clean clone of the working tree (so copier warns of no dirty template)."""
    clone = tmp_path_factory.mktemp("template") / "harbor-openenv"
    git("clone", "--quiet", "--no-hardlinks", str(REPO), str(clone), cwd=REPO)
    git("rm", "-rq", ".", cwd=clone)
    files = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO)
    for name in filter(None, files.split("\0")):
        if (REPO / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    commit_all(clone, "the working tree", allow_empty=True)
    return clone


@pytest.fixture(scope="module")
def index_env(tmp_path_factory) -> dict[str, str]:
    return fake_package_index(tmp_path_factory.mktemp("index"), ["0.1.0", "0.2.0"])


def copy(template: Path, out: Path, *data: str, cwd: Path, **env: str):
    command = [sys.executable, str(SCRIPT), "--trust", "--defaults", "--vcs-ref", "HEAD"]
    for item in data:
        command += [item] if item.startswith("--") else ["-d", item]
    return subprocess.run(
        [*command, str(template), str(out)],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("dataset_path={tmp}/missing", "-d dataset_path={tmp}/missing is refused: No task found"),
        ("port=abc", "-d port=abc: port must be a whole number: a port between 1 and 65535"),
        ("port=70000", "-d port=70000 is refused: Use a port between 1 and 65535"),
        ("port=0", "-d port=0 is refused: Use a port between 1 and 65535"),
        ("max_concurrent_envs=many", "max_concurrent_envs must be a whole number: at least 1"),
        ("env_name=Bad Name", "-d env_name=Bad Name is refused: Use 1-96 lower-case"),
        ("runtime_pin=/x/numpy-1.0-py3-none-any.whl", "not a harbor-openenv wheel's file name"),
        ("runtime_pin=harbor-openenv==9.9.9", "no harbor-openenv release matches it"),
        ("runtime_pin=harbor-openenv>=3", "runtime_pin harbor-openenv>=3: no harbor-openenv"),
        ("cached_harnesses=[opencode, nope]", "-d cached_harnesses=[opencode, nope] is refused:"
         " 'nope' is not in ['aider', 'claude-code', 'gemini-cli', 'opencode', 'pi', 'qwen-code']"),
        ("harnes_rollouts=true", "-d harnes_rollouts=true: harnes_rollouts is not a question of"
         " this template (did you mean harness_rollouts?)"),
        ("runtime_version=9.9", "-d runtime_version=9.9: runtime_version is computed by the"
         " template, not a question"),
    ],
)
def test_an_answer_mistake_is_one_line(template, index_env, tmp_path, answer, expected):
    out = tmp_path / "out"
    result = copy(template, out, answer.format(tmp=tmp_path), cwd=tmp_path, **index_env)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output and "returned non-zero exit status" not in output, output
    errors = [line for line in result.stderr.splitlines() if line.startswith(("copy:", "ERROR"))]
    assert len(errors) == 1 and expected.format(tmp=tmp_path) in errors[0], output
    if not answer.startswith("runtime_pin=harbor"):  # the copy task's check runs after render
        assert result.stderr.strip() == errors[0], output
    else:  # copier's file listing and the task's command line are behind --verbose
        assert " create " not in output and "Running task" not in output, output
    assert not out.exists(), f"{out} was left behind"


def test_verbose_shows_copiers_listing(template, index_env, tmp_path):
    result = copy(template, tmp_path / "a", "runtime_pin=harbor-openenv==9.9.9", "--verbose",
                  cwd=tmp_path, **index_env)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "create" in result.stderr and "Running task 1 of 1" in result.stderr, result.stderr


def test_published_pins_pass_and_offline_says_unchecked(template, index_env, tmp_path):
    result = copy(template, tmp_path / "a", "runtime_pin=harbor-openenv==0.2.0", cwd=tmp_path,
                  **index_env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "could not be checked" not in result.stderr
    offline = {**index_env, "HARBOR_OPENENV_PIN_INDEX_URL": "http://127.0.0.1:9/simple"}
    result = copy(template, tmp_path / "b", "runtime_pin=harbor-openenv==9.9.9", cwd=tmp_path,
                  **offline)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "WARNING: runtime_pin could not be checked (the package index could not be reached" in (
        result.stderr
    )


def test_a_relative_wheel_path_is_a_wheel_pin(template, index_env, tmp_path, runtime_wheel):
    (tmp_path / "dist").mkdir()
    shutil.copy2(runtime_wheel, tmp_path / "dist" / runtime_wheel.name)
    pin = f"runtime_pin=dist/{runtime_wheel.name}"
    result = copy(template, tmp_path / "env", pin, cwd=tmp_path, **index_env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "env" / "wheels" / runtime_wheel.name).is_file()
