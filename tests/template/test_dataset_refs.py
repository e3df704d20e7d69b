"""Dataset references: a Harbor registry ``name@version`` (real git clones at pinned commits of
local repositories, through ``copier copy`` and ``sync-tasks``) and a Hub repo id (resolution
logic only: no Hub is reachable here, so the download functions are stand-ins)."""

from __future__ import annotations

from _interop import HARBOR_VENV

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _template_helpers import tree_digest, write_task
from _server import ROOT

from harbor_openenv.datasets import sources as refs


def git(cwd: Path, *args: str) -> str:
    env_args = [
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "-c",
        "init.defaultBranch=main",
    ]
    result = subprocess.run(
        ["git", *env_args, *args], cwd=cwd, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def files_only(root: Path) -> dict[str, tuple]:
    """tree_digest without directories (their modes follow the umask, not the dataset)."""
    return {k: v for k, v in tree_digest(root).items() if v[0] != "dir"}


def snapshot(root: Path, version: int) -> Path:
    """Expected task folders for commit ``version`` (1 or 2): three tasks, bytes and modes.

    Changed files change size too: the repos are committed from copies with the same mtime, and
    git's stat check would not see a same-size edit."""
    for name in ("alpha", "beta", "gamma"):
        task = write_task(root / name)
        (task / "environment" / "data.bin").write_bytes(bytes(range(256)) * version)
        (task / "instruction.md").write_bytes(
            f"Do {name}, version {version}.\r\n".encode() * version
        )
        helper = task / "tests" / "helper.sh"
        helper.write_bytes(b"#!/bin/sh\nexit 0\n")
        helper.chmod(0o755 if version == 1 else 0o644)  # a mode-only change between commits
    return root


@pytest.fixture
def registry(tmp_path: Path) -> dict:
    """Two local git repos, two commits each; a registry file pinning the first commits."""
    expected = {v: snapshot(tmp_path / f"expected{v}", v) for v in (1, 2)}
    repo_a, repo_b = tmp_path / "repo-a", tmp_path / "repo-b"
    commits: dict[str, list[str]] = {"a": [], "b": []}
    for repo in (repo_a, repo_b):
        repo.mkdir()
        git(repo, "init", "-q")
    for v in (1, 2):
        for repo, names, key in ((repo_a, ("alpha", "beta"), "a"), (repo_b, ("gamma",), "b")):
            for name in names:
                target = repo / ("tasks/" + name if key == "a" else name)
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(expected[v] / name, target)
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", f"v{v}")
            commits[key].append(git(repo, "rev-parse", "HEAD"))

    def write(index: int) -> None:
        tasks = [
            {
                "name": "alpha",
                "git_url": repo_a.as_uri(),
                "git_commit_id": commits["a"][index],
                "path": "tasks/alpha",
            },
            {
                "name": "beta",
                "git_url": repo_a.as_uri(),
                "git_commit_id": commits["a"][index],
                "path": "tasks/beta",
            },
            {
                "name": "gamma",
                "git_url": repo_b.as_uri(),
                "git_commit_id": commits["b"][index],
                "path": "gamma",
            },
        ]
        rows = [
            {"name": "demo", "version": "1.0", "description": "three tasks", "tasks": tasks},
            {"name": "other", "version": "2", "description": "", "tasks": tasks[:1]},
        ]
        (tmp_path / "registry.json").write_text(json.dumps(rows, indent=1))

    write(0)
    return {
        "path": tmp_path / "registry.json",
        "expected": expected,
        "commits": commits,
        "pin": write,
        "repos": (repo_a, repo_b),
    }


def copier_copy(
    dest: Path, dataset: str, registry: Path | str, *, local: bool = True
) -> subprocess.CompletedProcess:
    """``copier copy`` of a reference; ``local``: the test registry's repositories are on this
    machine, which needs the explicit opt-in."""
    return subprocess.run(
        [sys.executable, "-m", "copier", "copy", "--trust", "--defaults", "--quiet"]
        + ["--vcs-ref", "HEAD", "-d", f"dataset_path={dataset}"]
        + (["-d", f"registry={registry}"] if registry else [])
        + (["-d", "registry_local_repos=true"] if registry and local else [])
        + [str(ROOT), str(dest)],
        capture_output=True,
        text=True,
    )


def sync(repo: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "harbor_openenv.cli.main",
            "sync-tasks",
            *extra,
            "--repo",
            str(repo),
        ],
        capture_output=True,
        text=True,
    )


def test_registry_reference_copies_pinned_commits_and_sync_re_resolves(registry, tmp_path):
    dest = tmp_path / "env"
    result = copier_copy(dest, "demo@1.0", registry["path"])
    assert result.returncode == 0, result.stderr
    assert files_only(dest / "tasks") == files_only(registry["expected"][1])
    assert files_only(dest / "tasks") != files_only(registry["expected"][2])
    answers = (dest / ".copier-answers.yml").read_text()
    assert "dataset_path: demo@1.0" in answers
    assert f"registry: {registry['path']}" in answers
    record = json.loads((dest / refs.SOURCE_NAME).read_text())
    pinned = {t["name"]: t["commit"] for t in record["tasks"]}
    a1, b1 = registry["commits"]["a"][0], registry["commits"]["b"][0]
    assert pinned == {"alpha": a1, "beta": a1, "gamma": b1}
    readme = (dest / "README.md").read_text()
    assert "`demo@1.0`" in readme and a1 in readme and b1 in readme
    assert "**3** tasks" in readme

    registry["pin"](1)  # the registry now pins the second commits
    result = sync(dest, "--allow-local-repos")
    assert result.returncode == 0, result.stderr
    assert "changed: alpha" in result.stdout and "changed: gamma" in result.stdout
    assert files_only(dest / "tasks") == files_only(registry["expected"][2])
    record = json.loads((dest / refs.SOURCE_NAME).read_text())
    a2 = registry["commits"]["a"][1]
    assert {t["commit"] for t in record["tasks"] if t["name"] != "gamma"} == {a2}
    readme = (dest / "README.md").read_text()
    assert a2 in readme and a1 not in readme


@pytest.mark.parametrize(
    ("reference", "registry_text", "message"),
    [
        ("demo@9.9", None, "demo@9.9: not in the registry"),
        ("nope@1.0", None, "nope@1.0: not in the registry"),
        ("demo@1.0", "{not json", "demo@1.0: cannot read the registry"),
        ("demo@1.0", '[{"name": "demo"}]', "demo@1.0: cannot read the registry"),
        ("demo@1.0", "BADCOMMIT", "demo@1.0: checkout of"),
        ("demo@1.0", "BADURL", "demo@1.0: git clone of"),
    ],
)
def test_unresolvable_references_fail_before_writing(
    registry, tmp_path, reference, registry_text, message
):
    path = registry["path"]
    if registry_text == "BADCOMMIT":
        path.write_text(path.read_text().replace(registry["commits"]["b"][0], "0" * 40))
    elif registry_text == "BADURL":
        path.write_text(path.read_text().replace(registry["repos"][1].as_uri(), "file:///nowhere"))
    elif registry_text is not None:
        path.write_text(registry_text)
    dest = tmp_path / "env"
    result = copier_copy(dest, reference, path)
    assert result.returncode != 0
    error = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(error) == 1, result.stderr
    assert error[0].startswith(f"ERROR: cannot resolve the dataset reference {message}"), error
    assert not dest.exists()


def test_sync_without_a_recorded_reference_is_a_clear_error(tmp_path):
    dest = tmp_path / "env"
    result = copier_copy(dest, str(ROOT / "examples" / "dataset"), "")
    assert result.returncode == 0, result.stderr
    assert not (dest / refs.SOURCE_NAME).exists()
    before = files_only(dest)
    result = sync(dest)
    assert result.returncode == 2, result.stderr
    assert f"no {refs.SOURCE_NAME} here" in result.stderr
    assert files_only(dest) == before


def test_kind_of():
    assert refs.kind_of("demo@1.0") == "registry"
    assert refs.kind_of("org/demo@v2") == "registry"
    assert refs.kind_of("hf://me/tasks") == "hub"
    assert refs.kind_of("/data/set") == "local"
    assert refs.kind_of("./x@1") == "local"


# -- the Hub: resolution logic only --------------------------------------------------------------
# Proven here: the reference is parsed (repo id, revision), the revision is turned into a commit
# first and that commit is what is downloaded and recorded, the downloaded folder's tasks/ is what
# gets copied, and a failing download is one line naming the reference. Not proven (no Hub here):
# that huggingface_hub's dataset_info/snapshot_download behave as called.


def test_hub_reference_resolution_with_a_stand_in_download(tmp_path):
    layout = snapshot(tmp_path / "hub" / "tasks", 1).parent
    calls: list[tuple] = []

    def commit_of(repo_id: str, revision: str | None) -> str:
        calls.append(("commit", repo_id, revision))
        return "c0ffee" * 6 + "abcd"

    def download(repo_id: str, commit: str, dest: Path) -> Path:
        calls.append(("download", repo_id, commit))
        shutil.copytree(layout, dest)
        return dest

    work = tmp_path / "work"
    work.mkdir()
    resolved = refs.resolve_hub("hf://me/tasks@v1", work, commit_of=commit_of, download=download)
    assert calls == [("commit", "me/tasks", "v1"), ("download", "me/tasks", "c0ffee" * 6 + "abcd")]
    assert resolved.record == {
        "reference": "hf://me/tasks@v1",
        "repo_id": "me/tasks",
        "revision": "v1",
        "commit": "c0ffee" * 6 + "abcd",
    }
    from harbor_openenv.datasets.sync import open_dataset

    dataset, _ = open_dataset(resolved.root)
    assert dataset.ids == ["alpha", "beta", "gamma"]
    assert files_only(dataset.root) == files_only(layout / "tasks")
    assert "c0ffee" in refs.source_markdown(resolved.record)

    def failing(repo_id: str, commit: str, dest: Path) -> Path:
        raise OSError("404 Client Error\nmore")

    with pytest.raises(refs.RefError, match=r"^hf://me/tasks: cannot download from the Hub: 404"):
        refs.resolve_hub("hf://me/tasks", work, commit_of=commit_of, download=failing)
    with pytest.raises(refs.RefError, match="not a Hub reference"):
        refs.resolve_hub("hf://nope", work, commit_of=commit_of, download=download)


def test_sync_to_another_reference_given_on_the_command_line(registry, tmp_path):
    dest = tmp_path / "env"
    assert copier_copy(dest, "demo@1.0", registry["path"]).returncode == 0
    result = sync(dest, "other@2")  # no --registry: a registry reference needs one
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "harbor-openenv sync-tasks: other@2: a registry reference needs a registry file"
        " (copier: -d registry=PATH or URL; sync-tasks: --registry)"
    )
    result = sync(dest, "other@2", "--registry", registry["path"].as_uri(), "--allow-local-repos")
    assert result.returncode == 0, result.stderr
    assert "removed: beta" in result.stdout and "removed: gamma" in result.stdout
    assert sorted(p.name for p in (dest / "tasks").iterdir()) == ["alpha"]
    record = json.loads((dest / refs.SOURCE_NAME).read_text())
    assert record["reference"] == "other@2"
    assert record["registry"] == registry["path"].as_uri()
    assert "`other@2`" in (dest / "README.md").read_text()




def test_harbor_downloads_the_same_tasks_from_the_same_registry(registry, tmp_path):
    """Harbor 0.25's own `harbor datasets download --registry-path` (Harbor's venv, installed by
    .ci/interop-tools.sh) reads our test registry and lays out the same bytes and modes."""
    ours = refs.resolve_registry(
        "demo@1.0", str(registry["path"]), tmp_path / "ours", local_repos=True
    )
    out = tmp_path / "harbor"
    result = subprocess.run(
        [str(HARBOR_VENV / "bin" / "harbor"), "datasets", "download", "demo@1.0"]
        + ["--registry-path", str(registry["path"]), "-o", str(out), "--export"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert files_only(out / "demo") == files_only(ours.root) == files_only(registry["expected"][1])


def test_a_relative_registry_path_and_a_missing_one(registry, tmp_path):
    dest = tmp_path / "env"
    result = subprocess.run(
        [sys.executable, "-m", "copier", "copy", "--trust", "--defaults", "--quiet"]
        + ["--vcs-ref", "HEAD", "-d", "dataset_path=demo@1.0", "-d", "registry=registry.json"]
        + ["-d", "registry_local_repos=true", str(ROOT), str(dest)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # relative to where copier runs, recorded absolute for sync-tasks
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((dest / refs.SOURCE_NAME).read_text())["registry"] == str(registry["path"])
    missing = tmp_path / "env2"
    result = copier_copy(missing, "demo@1.0", "")
    assert result.returncode != 0
    assert "Give the registry file (a path or URL) that lists demo@1.0" in result.stderr
    assert not missing.exists()


def test_local_repositories_need_the_users_opt_in(registry, tmp_path):
    """A registry file naming repositories on this machine (file://, a path) is refused unless
    the user says so: copier's answer, sync-tasks' flag, the API's keyword."""
    dest = tmp_path / "env"
    result = copier_copy(dest, "demo@1.0", registry["path"], local=False)
    assert result.returncode != 0
    assert "is a local repository (a path or file://)" in result.stderr, result.stderr
    assert "-d registry_local_repos=true" in result.stderr
    assert not dest.exists()
    plain_path = json.loads(registry["path"].read_text())
    for row in plain_path:
        for task in row["tasks"]:
            task["git_url"] = task["git_url"].removeprefix("file://")
    (tmp_path / "paths.json").write_text(json.dumps(plain_path))
    with pytest.raises(refs.RefError, match="is a local repository"):
        refs.resolve_registry("demo@1.0", str(tmp_path / "paths.json"), tmp_path / "w1")
    assert copier_copy(dest, "demo@1.0", registry["path"]).returncode == 0
    result = sync(dest)  # re-resolving needs the opt-in again
    assert result.returncode == 2 and "--allow-local-repos" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("git_commit_id", "--upload-pack=cat /etc/passwd", "is not a commit id"),
        ("git_commit_id", "main", "is not a commit id"),
        ("git_url", "--upload-pack=touch /tmp/pwned", "is a local repository"),
    ],
)
def test_registry_fields_never_reach_git_as_options(registry, tmp_path, field, value, message):
    rows = json.loads(registry["path"].read_text())
    rows[0]["tasks"][0][field] = value
    (tmp_path / "bad.json").write_text(json.dumps(rows))
    with pytest.raises(refs.RefError, match=message) as raised:
        refs.resolve_registry("demo@1.0", str(tmp_path / "bad.json"), tmp_path / "w")
    assert "root:" not in str(raised.value)


def test_a_url_that_looks_like_an_option_is_a_url_to_git(registry, tmp_path):
    """With the opt-in, git still gets "--" before the URL: an option-looking one is a missing
    repository, never an option."""
    rows = json.loads(registry["path"].read_text())
    rows[0]["tasks"][0]["git_url"] = "--upload-pack=touch " + str(tmp_path / "pwned")
    (tmp_path / "bad.json").write_text(json.dumps(rows))
    with pytest.raises(refs.RefError, match="git clone of --upload-pack"):
        refs.resolve_registry(
            "demo@1.0", str(tmp_path / "bad.json"), tmp_path / "w", local_repos=True
        )
    assert not (tmp_path / "pwned").exists()


def test_a_registry_path_of_dot_is_the_repositorys_root(tmp_path):
    """A repository that is one task, registered with `path = "."`, lands at tasks/<name>."""
    repo = write_task(tmp_path / "solo-repo")
    (repo / "environment" / "data.bin").write_bytes(bytes(range(256)))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one task")
    commit = git(repo, "rev-parse", "HEAD")
    task = {"name": "org/solo", "git_url": repo.as_uri(), "git_commit_id": commit, "path": "."}
    registry = tmp_path / "registry.json"
    registry.write_text(json.dumps([{"name": "solo", "version": "1", "tasks": [task]}]))
    resolved = refs.resolve_registry("solo@1", str(registry), tmp_path / "work", local_repos=True)
    placed = resolved.root / "solo"
    assert files_only(placed) == {k: v for k, v in files_only(repo).items() if ".git" not in k}
    assert not (placed / ".git").exists()
    assert resolved.record["tasks"][0]["path"] == "."
