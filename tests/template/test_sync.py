"""`harbor-openenv sync-tasks`: refresh a rendered repo's tasks/ from a changed dataset."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _template_helpers import tree_digest
from _server import ROOT

from harbor_openenv.datasets.manifest import MANIFEST_NAME, read_modes, verify_manifest

EXAMPLE = ROOT / "examples" / "dataset"


@pytest.fixture
def setup(tmp_path) -> tuple[Path, Path]:
    """A dataset copy and an environment repo rendered from it."""
    dataset = tmp_path / "dataset"
    shutil.copytree(EXAMPLE, dataset)
    repo = tmp_path / "env"
    result = subprocess.run(
        [sys.executable, "-m", "copier", "copy", "--trust", "--defaults", "--quiet"]
        + ["--vcs-ref", "HEAD", "-d", f"dataset_path={dataset}", str(ROOT), str(repo)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return dataset, repo


def sync(dataset: Path, repo: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harbor_openenv.cli.main", "sync-tasks", str(dataset)]
        + ["--repo", str(repo), *extra],
        capture_output=True,
        text=True,
    )


def change_dataset(dataset: Path) -> None:
    tasks = dataset / "tasks"
    shutil.copytree(tasks / "hello-world", tasks / "hello-again")
    shutil.copytree(tasks / "hello-world", tasks / "more" / "hello-nested")
    with (tasks / "word-count" / "instruction.md").open("a") as handle:
        handle.write("\nCount hyphenated words once.\n")
    shutil.rmtree(tasks / "fix-sum-bug")


def test_sync_reports_and_applies_added_changed_removed(setup):
    dataset, repo = setup
    change_dataset(dataset)
    readme_before = (repo / "README.md").read_text()

    dry = sync(dataset, repo, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[:4] == [
        "added: hello-again",
        "added: more/hello-nested",
        "changed: word-count",
        "removed: fix-sum-bug",
    ]
    assert "dry run, nothing written" in dry.stdout
    assert "hello-again" not in {p.name for p in (repo / "tasks").iterdir()}

    done = sync(dataset, repo)
    assert done.returncode == 0, done.stderr
    assert "2 added, 1 changed, 1 removed, 3 unchanged (replaced tasks/" in done.stdout
    assert tree_digest(repo / "tasks") == tree_digest(dataset / "tasks")
    assert verify_manifest(repo / MANIFEST_NAME) == []
    readme = (repo / "README.md").read_text()
    assert "| runnable (Docker container per episode) | 4 |" in readme_before
    assert "| runnable (Docker container per episode) | 5 |" in readme

    written = {
        p: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in (repo / MANIFEST_NAME, repo / "README.md")
    }
    again = sync(dataset, repo)
    assert again.returncode == 0, again.stderr
    assert again.stdout == (
        "0 added, 0 changed, 0 removed, 6 unchanged: tasks/ already up to date, nothing written\n"
    )
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in written} == written


def test_local_changes_are_refused_unless_forced(setup):
    dataset, repo = setup
    change_dataset(dataset)
    edited = repo / "tasks" / "hello-world" / "tests" / "test.sh"
    edited.write_text(edited.read_text() + "# local tweak\n")
    before = tree_digest(repo / "tasks")

    refused = sync(dataset, repo)
    assert refused.returncode == 2  # a user's mistake, nothing written
    assert "local changes" in refused.stderr
    assert "changed: tasks/hello-world/tests/test.sh" in refused.stderr
    assert tree_digest(repo / "tasks") == before

    forced = sync(dataset, repo, "--force")
    assert forced.returncode == 0, forced.stderr
    assert tree_digest(repo / "tasks") == tree_digest(dataset / "tasks")


def test_an_invalid_dataset_changes_nothing(setup):
    dataset, repo = setup
    (dataset / "tasks" / "word-count" / "task.toml").write_text('[environment]\ncpus = "x"\n')
    before = tree_digest(repo / "tasks")
    result = sync(dataset, repo)
    assert result.returncode == 2
    assert "word-count/task.toml: [environment].cpus" in result.stderr
    assert tree_digest(repo / "tasks") == before


def test_not_an_environment_repo(tmp_path):
    result = sync(EXAMPLE, tmp_path)
    assert result.returncode == 2
    assert "no tasks/ and tasks.sha256 here" in result.stderr


def test_a_dataset_folder_that_is_not_there(setup):
    _, repo = setup
    result = sync(repo / "no-such-dataset", repo)
    assert result.returncode == 2
    assert "dataset folder not found" in result.stderr


def test_mode_only_changes_are_synced(setup):
    dataset, repo = setup
    script = dataset / "tasks" / "hello-world" / "solution" / "solve.sh"
    assert os.access(repo / "tasks" / "hello-world" / "solution" / "solve.sh", os.X_OK)
    script.chmod(0o644)  # chmod -x, bytes unchanged

    dry = sync(dataset, repo, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == "changed: hello-world"
    done = sync(dataset, repo)
    assert done.returncode == 0, done.stderr
    assert "0 added, 1 changed, 0 removed" in done.stdout
    assert tree_digest(repo / "tasks") == tree_digest(dataset / "tasks")
    assert "tasks/hello-world/solution/solve.sh" not in read_modes(repo / MANIFEST_NAME)
    if shutil.which("sha256sum"):
        check = subprocess.run(["sha256sum", "--strict", "-c", MANIFEST_NAME], cwd=repo)
        assert check.returncode == 0

    script.chmod(0o755)
    assert "changed: hello-world" in sync(dataset, repo).stdout
    assert os.access(repo / "tasks" / "hello-world" / "solution" / "solve.sh", os.X_OK)


def test_a_local_chmod_is_a_local_change(setup):
    dataset, repo = setup
    (repo / "tasks" / "hello-world" / "solution" / "solve.sh").chmod(0o644)
    refused = sync(dataset, repo)
    assert refused.returncode == 2
    assert "mode changed: tasks/hello-world/solution/solve.sh" in refused.stderr


def test_a_manifest_without_modes_compares_the_files_modes(setup):
    """A repo rendered before modes were recorded: its tasks/ files' own bits stand in."""
    dataset, repo = setup
    manifest = repo / MANIFEST_NAME
    lines = manifest.read_text().splitlines(True)
    manifest.write_text("".join(line for line in lines if not line.startswith("#")))
    assert sync(dataset, repo).stdout.endswith("already up to date, nothing written\n")
    (dataset / "tasks" / "hello-world" / "solution" / "solve.sh").chmod(0o644)
    done = sync(dataset, repo)
    assert done.stdout.startswith("changed: hello-world\n"), done.stdout + done.stderr
    assert read_modes(manifest) is not None  # rewritten with modes


def test_invalid_tasks_are_refused_unless_allowed(setup):
    dataset, repo = setup
    helper = dataset / "tasks" / "templates" / "base"
    helper.mkdir(parents=True)
    (helper / "task.toml").write_text("[verifier]\ntimeout_sec = 60.0\n")
    refused = sync(dataset, repo)
    assert refused.returncode == 2, refused
    assert "templates/base/instruction.md" in refused.stderr and "--allow-invalid" in refused.stderr
    kept = sync(dataset, repo, "--allow-invalid")
    assert kept.returncode == 0, kept.stderr
    assert "added: templates/base" in kept.stdout
    assert (repo / "tasks" / "templates" / "base" / "task.toml").is_file()
    assert "- `templates/base`:" in (repo / "README.md").read_text()
    assert verify_manifest(repo / MANIFEST_NAME) == []


def test_the_readme_lists_each_invalid_task_once(tmp_path):
    """Each problem starts with its task's id; the README's list names the id once per task."""
    from _task_helpers import make_task, write

    from harbor_openenv.datasets.sync import open_dataset, summary_markdown

    make_task(tmp_path, "good")
    write(tmp_path / "templates" / "base" / "task.toml", "[verifier]\ntimeout_sec = 60.0\n")
    make_task(tmp_path, "no-env", dockerfile=False)
    _, by_kind = open_dataset(tmp_path, allow_invalid=True)
    lines = [line for line in summary_markdown(by_kind).splitlines() if line.startswith("- `")]
    assert lines[0].startswith("- `no-env`: no environment/Dockerfile")
    assert lines[1] == "- `templates/base`: instruction.md: missing"
    for line in lines:
        task_id = line.split("`")[1]
        assert line.count(task_id) == 1, line
