"""/metadata names the environment (its openenv.yaml), with the runtime's version beside it."""

from __future__ import annotations

import shutil
import subprocess
import sys

import httpx
import yaml
from _server import FIXTURE_TASKS, ROOT, Server

from harbor_openenv import __version__
from harbor_openenv.server.metadata import environment_about


def metadata(tasks, **env) -> dict:
    server = Server(tasks, **env)
    try:
        return httpx.get(f"{server.url}/metadata", timeout=10).json()
    finally:
        server.stop()


def test_metadata_of_a_rendered_environment(tmp_path):
    repo = tmp_path / "my-env"
    rendered = subprocess.run(
        [sys.executable, "-m", "copier", "copy", "--trust", "--defaults", "--quiet"]
        + ["--vcs-ref", "HEAD", "-d", f"dataset_path={ROOT / 'examples' / 'dataset'}"]
        + ["-d", "env_name=my-env", str(ROOT), str(repo)],
        capture_output=True,
        text=True,
    )
    assert rendered.returncode == 0, rendered.stderr
    manifest = yaml.safe_load((repo / "openenv.yaml").read_text())

    about = metadata(repo / "tasks")
    assert about["name"] == manifest["name"] == "my-env"
    assert about["version"] == str(manifest["version"])
    assert about["description"] == (
        f"{manifest['description']} (served by harbor-openenv {__version__})"
    )
    assert about["readme_content"] == (repo / "README.md").read_text()


def test_metadata_from_variables_or_the_folder(tmp_path):
    home = tmp_path / "some-dataset"
    shutil.copytree(FIXTURE_TASKS / "edit-file", home / "tasks" / "edit-file")
    about = environment_about(home / "tasks")  # the server's own answer is the test above's
    assert (about["name"], about["version"]) == ("some-dataset", None)
    assert about["description"].endswith(f"(served by harbor-openenv {__version__})")

    (home / "openenv.yaml").write_text("name: from-yaml\nversion: '1.2.3'\ndescription: Yes.\n")
    named = metadata(home / "tasks", HARBOR_OPENENV_ENV_NAME="from-env")
    assert (named["name"], named["version"]) == ("from-env", "1.2.3")
    assert named["description"] == f"Yes. (served by harbor-openenv {__version__})"
