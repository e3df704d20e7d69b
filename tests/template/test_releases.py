"""Months of updates as a user lives them: three releases, edits where the template says.

A clone of the template is released three times (v0.2.0, v0.3.0, v0.4.0: each moves the runtime
pin). The environment is rendered from the first, edited the way its files invite (a dependency
added exactly where pyproject.toml's comment says, a README paragraph, a Dockerfile line), and
updated to each later release with ``harbor-openenv update``: no conflict, every edit kept.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from _template_helpers import REPO, commit_all, fake_package_index, git, release_series

EXAMPLE = REPO / "examples" / "dataset"
RELEASES = ["0.2.0", "0.3.0", "0.4.0"]


@pytest.fixture(autouse=True)
def published_runtime(tmp_path_factory, monkeypatch):
    """The pin check looks pins up on a local index with harbor-openenv 0.1.0 and 0.2.0."""
    index = tmp_path_factory.mktemp("package-index")
    for key, value in fake_package_index(index, ["0.1.0", "0.2.0"]).items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return release_series(tmp_path_factory.mktemp("releases") / "harbor-openenv", RELEASES)


def copy(template: Path, destination: Path, ref: str, *data: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "copier", "copy", "--trust", "--defaults", "--vcs-ref", ref]
    for item in data:
        command += ["-d", item]
    result = subprocess.run(
        [*command, str(template), str(destination)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    git("init", "-q", "-b", "main", cwd=destination)
    commit_all(destination, "rendered")
    return result


def update(repo: Path, ref: str, *data: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "harbor_openenv.cli.main",
        "update",
        str(repo),
        "--vcs-ref",
        ref,
    ]
    for item in data:
        command += ["-d", item]
    return subprocess.run(command, capture_output=True, text=True)


def test_own_dependency_readme_and_dockerfile_edits_survive_two_releases(template, tmp_path):
    repo = tmp_path / "env"
    rendered = copy(template, repo, "v0.2.0", f"dataset_path={EXAMPLE}")
    # A published release builds nothing: its pin comes from the package index.
    assert "not a published release" not in rendered.stderr
    assert not list((repo / "wheels").glob("*.whl"))
    # its README's client line assumes the release is on an index, and says the wheel route
    # until it is
    readme = (repo / "README.md").read_text()
    assert "pip install 'harbor-openenv[client]==0.2.0'" in readme
    assert "release 0.2.0 published on your index" in readme
    assert "until it is, take the wheel route" in readme
    assert "`uv build --wheel --out-dir dist runtime`" in readme

    pyproject = (repo / "pyproject.toml").read_text()
    anchor = "# Your own dependencies go here, one per line"
    assert anchor in pyproject and "dependencies = [\n]\n" in pyproject
    pyproject = pyproject.replace(
        "dependencies = [\n]\n", 'dependencies = [\n    "numpy>=1.26",\n]\n'
    )
    (repo / "pyproject.toml").write_text(pyproject)
    readme = (repo / "README.md").read_text()
    readme = readme.replace("## Run it\n", "## Run it\n\nOur cluster runs it with 16 sessions.\n")
    (repo / "README.md").write_text(readme)
    dockerfile = (repo / "Dockerfile").read_text()
    dockerfile = dockerfile.replace("WORKDIR /app\n", "WORKDIR /app\nENV OUR_SETTING=1\n")
    (repo / "Dockerfile").write_text(dockerfile)
    commit_all(repo, "our dependency, README and Dockerfile")

    for version in RELEASES[1:]:
        result = update(repo, f"v{version}")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "updated without conflicts" in result.stderr
        data = tomllib.loads((repo / "pyproject.toml").read_text())
        assert data["project"]["dependencies"] == ["numpy>=1.26"]
        assert data["dependency-groups"]["runtime"] == [f"harbor-openenv[server]=={version}"]
        assert "Our cluster runs it with 16 sessions." in (repo / "README.md").read_text()
        assert "ENV OUR_SETTING=1" in (repo / "Dockerfile").read_text()
        assert f"_commit: v{version}" in (repo / ".copier-answers.yml").read_text()
        assert git(
            "status", "--porcelain", "--untracked-files=no", cwd=repo
        )  # changed, unmerged none
        commit_all(repo, f"update to v{version}")


def test_renaming_renames_the_default_description(template, tmp_path):
    repo = tmp_path / "env"
    copy(template, repo, "v0.2.0", f"dataset_path={EXAMPLE}")
    result = update(repo, "v0.3.0", "env_name=renamed-env")
    assert result.returncode == 0, result.stdout + result.stderr
    expected = "OpenEnv environment serving the Harbor tasks of renamed-env"
    for name in ("openenv.yaml", "README.md", "pyproject.toml"):
        text = (repo / name).read_text()
        assert expected in text and "of example-env" not in text, name
    assert yaml.safe_load((repo / "openenv.yaml").read_text())["name"] == "renamed-env"


@pytest.mark.parametrize(
    "data, broken, expected",
    [
        (["port=abc"], None, "-d port=abc is not a whole number"),
        (["env_name=Bad Name"], None, "the answer to env_name is refused: Use 1-96 lower-case"),
        (["nonsense"], None, "-d nonsense: write it as KEY=VALUE"),
        (["runtime_pin=harbor-openenv==9.9.9"], None, "harbor-openenv==9.9.9: no harbor-openenv"),
        (["runtime_pin=/x/numpy-1.0-py3-none-any.whl"], None, "not a harbor-openenv wheel's"),
        ([], ("port: 8000", "port: [8000"), ".copier-answers.yml is not valid YAML at line"),
        ([], ("port: 8000", "port: eighty"), ".copier-answers.yml: port: eighty is not a whole"),
        ([], ("_commit: v0.2.0", "_commit: v0.1.99"), "records _commit: v0.1.99, which the"),
        ([], ("_src_path: ", "_src_path: /nowhere/x #"), "the template /nowhere/x (_src_path"),
        ([], ("_src_path: ", "_src_path: . #"), "relative template path _src_path: ."),
        ([], "uncommitted", "the repo has uncommitted changes: commit them"),
    ],
)
def test_mistakes_get_one_line_saying_what_to_do(template, tmp_path, data, broken, expected):
    repo = tmp_path / "env"
    copy(template, repo, "v0.2.0", f"dataset_path={EXAMPLE}")
    if broken == "uncommitted":
        (repo / "notes.md").write_text("not committed yet\n")
    elif broken:
        answers = repo / ".copier-answers.yml"
        text = answers.read_text()
        assert broken[0] in text
        answers.write_text(text.replace(broken[0], broken[1], 1))
        commit_all(repo, "broken by hand")
    result = update(repo, "v0.3.0", *data)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harbor-openenv update: "), result.stderr
    assert expected in lines[0], lines[0]
    assert "Traceback" not in result.stdout + result.stderr


YOURS = "<!-- harbor-openenv:yours"


def test_notes_in_the_readme_section_of_your_own_survive_a_release_adding_a_section(tmp_path):
    """The rendered README ends with a section no template release touches: a user's notes there
    merge without conflicts with a release that adds a section at the README's end (above it)."""
    template = release_series(tmp_path / "harbor-openenv", ["0.2.0"])
    jinja = template / "template" / "README.md.jinja"
    text = jinja.read_text()
    section = "## A new section\n\nAdded by release 0.3.0.\n\n"
    where = text.find("## Your notes\n")  # above the user's section (main had none: at the end)
    text = text[:where] + section + text[where:] if where >= 0 else text + "\n" + section
    jinja.write_text(text)
    version = template / "runtime" / "src" / "harbor_openenv" / "_version.py"
    version.write_text('__version__ = "0.3.0"\n')
    commit_all(template, "Release v0.3.0")
    git("tag", "v0.3.0", cwd=template)

    repo = tmp_path / "env"
    copy(template, repo, "v0.2.0", f"dataset_path={EXAMPLE}")
    readme = (repo / "README.md").read_text()
    notes = "\nOur cluster: 16 sessions a node.\n\nTrain on split `train` only.\n"
    (repo / "README.md").write_text(readme + notes)
    commit_all(repo, "our notes")
    result = update(repo, "v0.3.0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "updated without conflicts" in result.stderr
    readme = (repo / "README.md").read_text()
    assert readme.endswith(notes), readme[-500:]
    assert YOURS in readme and "harbor-openenv update" in readme.split(YOURS)[1]
    assert readme.index("## A new section") < readme.index(YOURS)
