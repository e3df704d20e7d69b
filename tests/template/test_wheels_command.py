"""``harbor-openenv wheels``: what it reads, and its one-line refusals (no Docker, no network).

The full fill (114 wheels for the example, then ``docker build --network none``) is walked by
tests/template/test_road.py, as the rendered README says to.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _template_helpers import run_copier

from harbor_openenv.images.wheels import base_image, image_python, requirements


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheels") / "env"
    run = run_copier(out, "base_image=python:3.12-slim", quiet=True)
    assert run.returncode == 0, run.stderr
    return out


def wheels(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harbor_openenv.cli.main", "wheels", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_reads_what_the_image_installs(env):
    pyproject = env / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace("dependencies = [\n]", 'dependencies = [\n    "numpy"\n]'))
    try:
        wanted = requirements(env)
    finally:
        pyproject.write_text(text)
    assert wanted[0] == "numpy" and wanted[1].startswith("harbor-openenv[server]==")
    assert base_image(env) == "python:3.12-slim"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--python", "3.99"], "no Python 3.99 here to build the wheels with"),
        (["--python", "three"], "--python three: give a version like 3.12"),
    ],
)
def test_refusals_are_one_line(env, args, expected):
    dockerfile = env / "Dockerfile"
    text = dockerfile.read_text()  # a base image that is not here: only --python says the version
    dockerfile.write_text(
        text.replace("ARG BASE_IMAGE=python:3.12-slim", "ARG BASE_IMAGE=no-such:3.12")
    )
    try:
        result = wheels("--repo", str(env), *args)
    finally:
        dockerfile.write_text(text)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


@pytest.mark.docker
def test_a_python_the_base_image_does_not_run_is_refused(env):
    """Wheels for another Python than the base image's would fail the offline build: the
    version the image answers wins over --python (and over its tag, which is only noted)."""
    found = image_python("python:3.12-slim")
    assert found, "python:3.12-slim (the stand-in image) is not here: bash .ci/standin-images.sh"
    other = "3.10" if found != "3.10" else "3.9"
    result = wheels("--repo", str(env), "--python", other)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"harbor-openenv wheels: --python {other}, but the base image python:3.12-slim runs"
        f" Python {found}: its pip would refuse these wheels; drop --python (or pass --python"
        f" {found})"
    )


@pytest.mark.parametrize("extras", ["server,harness,harbor", "harbor"])
def test_harbor_for_a_python_older_than_312_is_refused(env, extras):
    """terminus-2's harbor extra, whose Harbor needs Python 3.12: its marker would leave Harbor
    out of a 3.11 image without a word, so the fill refuses, before any pip runs."""
    pyproject = env / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace("harbor-openenv[server]", f"harbor-openenv[{extras}]"))
    try:
        result = wheels(
            "--repo", str(env), "--python", "3.11", "--platform", "manylinux2014_x86_64"
        )
    finally:
        pyproject.write_text(text)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        "harbor-openenv wheels: pyproject.toml asks for the runtime's harbor extra (terminus-2),"
        " which needs Python 3.12 or later, and the image runs Python 3.11: give the Dockerfile"
        " a base image with Python 3.12 or later (the copier answer base_image)"
    )


def test_not_an_environment_repo(tmp_path):
    result = wheels("--repo", str(tmp_path), "--python", "3.12")
    assert result.returncode == 2
    assert "no pyproject.toml; run this in an environment repo" in result.stderr
