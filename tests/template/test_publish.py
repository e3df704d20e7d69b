"""CONTRIBUTING.md's "Releasing", walked up to the upload and back: a clone released as v0.5.0 (the
commit "Release v0.5.0", tagged) is published by ``bash scripts/release URL`` to a package index on
127.0.0.1 (pypiserver, which accepts twine's uploads), and a fresh virtual environment installs the
runtime from that index alone. What is not a release is refused in one line, nothing built."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from _template_helpers import REPO, commit_all, git, release_series

from harbor_openenv.client.launch import free_port

VENV_BIN = REPO / ".venv" / "bin"


def release(clone: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "scripts/release", *args],
        cwd=clone,
        env={**os.environ, "TWINE_USERNAME": "ci", "TWINE_PASSWORD": "ci", **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    clone = release_series(tmp_path_factory.mktemp("release") / "harbor-openenv", ["0.5.0"])
    (clone / ".venv").symlink_to(REPO / ".venv")  # the development environment, as scripts/dev made
    with (clone / ".git" / "info" / "exclude").open("a") as exclude:
        exclude.write(".venv\n")  # a link, which .gitignore's ".venv/" does not match
    return clone


@pytest.fixture
def index(tmp_path):
    """pypiserver on 127.0.0.1, uploads open (``-a . -P .``); its URL."""
    port, packages = free_port(), tmp_path / "packages"
    packages.mkdir()
    server = subprocess.Popen(
        [str(VENV_BIN / "pypi-server"), "run", "-i", "127.0.0.1", "-p", str(port),
         "-a", ".", "-P", ".", str(packages)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_release_is_published_and_installs_from_the_index(released, index, tmp_path):
    steps = (REPO / "CONTRIBUTING.md").read_text()
    assert "`bash scripts/release https://upload.example/legacy/`" in steps
    result = release(released, f"{index}/")
    assert result.returncode == 0, result.stdout + result.stderr
    listing = httpx.get(f"{index}/simple/harbor-openenv/", timeout=10).text
    assert "harbor_openenv-0.5.0-py3-none-any.whl" in listing
    assert "harbor_openenv-0.5.0.tar.gz" in listing
    venv = tmp_path / "user-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
    for source in ("--only-binary=:all:", "--no-binary=harbor-openenv"):  # the wheel, the sdist
        install = subprocess.run(
            [*pip, "--force-reinstall", source, "--index-url", f"{index}/simple/",
             "harbor-openenv==0.5.0"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert install.returncode == 0, install.stderr
        version = subprocess.run(
            [str(venv / "bin" / "python"), "-c",
             "import harbor_openenv; print(harbor_openenv.__version__)"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert version.stdout.strip() == "0.5.0"


def test_what_is_no_release_is_refused_in_one_line(released, tmp_path):
    shutil.rmtree(released / "dist", ignore_errors=True)
    (released / "notes.txt").write_text("draft\n")
    dirty = release(released, "http://127.0.0.1:9/")
    assert (dirty.returncode, dirty.stderr.strip()) == (
        2, "release: the tree has uncommitted changes: commit or stash them"
    )  # fmt: skip
    commit_all(released, "notes")
    untagged = release(released, "http://127.0.0.1:9/")
    assert (untagged.returncode, untagged.stderr.strip()) == (
        2, "release: HEAD is not the commit 'Release v0.5.0'"
    )  # fmt: skip
    git("reset", "-q", "--hard", "v0.5.0", cwd=released)
    assert not (released / "dist").exists()
