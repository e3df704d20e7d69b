"""`copier update` the way a user lives it: render an old release, edit, update, rebuild, serve.

The template is cloned into a temporary folder with real tags: ``v0.1.0`` (this repository's
first release, found by its commit when the clone has no tags) and ``v999.0.0`` on a commit of
the working tree, a fake high version so that version-gated migrations would run (an update to
an untagged HEAD runs none).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _template_helpers import (
    NEW,
    OLD,
    RUNTIME_VERSION,
    commit_all,
    fake_package_index,
    git,
    tagged_template_clone,
    tree_digest,
    write_task,
)
from _server import ROOT, TOKEN
from _images import add_wheels, build_offline, build_runtime_wheel, serve_image

from harbor_openenv.client.launch import free_port

EXAMPLE = ROOT / "examples" / "dataset"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return tagged_template_clone(tmp_path_factory.mktemp("template") / "harbor-openenv")


def copier(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "copier", *args], cwd=cwd, capture_output=True, text=True
    )


def render_old(template: Path, destination: Path, port: int) -> Path:
    result = copier(
        "copy", "--trust", "--defaults", "--quiet", "--vcs-ref", OLD,
        "-d", f"dataset_path={EXAMPLE}", "-d", f"port={port}",
        str(template), str(destination),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    git("init", "-q", "-b", "main", cwd=destination)
    commit_all(destination, "rendered from the template")
    return destination


def user_edits(repo: Path) -> dict[str, str]:
    """A new file, an edited README paragraph and an extra dependency, committed."""
    (repo / "notes").mkdir()
    (repo / "notes" / "trainer.md").write_text("Our GRPO settings.\n")
    readme = (repo / "README.md").read_text()
    paragraph = "## Tasks\n"
    assert paragraph in readme
    readme = readme.replace(paragraph, paragraph + "\nWe train with 16 sessions per node.\n")
    (repo / "README.md").write_text(readme)
    with (repo / "pyproject.toml").open("a") as handle:
        handle.write('\n[project.optional-dependencies]\ntrain = ["numpy>=1.26"]\n')
    commit_all(repo, "our changes")
    return {
        "notes/trainer.md": "Our GRPO settings.",
        "README.md": "We train with 16 sessions per node.",
        "pyproject.toml": 'train = ["numpy>=1.26"]',
    }


@pytest.fixture(autouse=True)
def published_runtime(tmp_path_factory, monkeypatch):
    """harbor-openenv 0.1.0 and 0.2.0 published on a local package index: the pins these tests
    give are checked against it (harbor_openenv.cli.pins), not against the real index."""
    index = tmp_path_factory.mktemp("package-index")
    from plumbum import local  # copier runs its tasks with plumbum's copy of the environment

    for key, value in fake_package_index(index, ["0.1.0", "0.2.0"]).items():
        monkeypatch.setenv(key, value)
        monkeypatch.setitem(local.env, key, value)


def update(repo: Path, *extra: str) -> subprocess.CompletedProcess:
    """Our tooling: copier update plus the conflict check copier leaves out."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "harbor_openenv.cli.main",
            "update",
            str(repo),
            "--vcs-ref",
            NEW,
            *extra,
        ],
        capture_output=True,
        text=True,
    )


def no_conflict_markers(repo: Path) -> bool:
    return not any(
        b"<<<<<<<" in path.read_bytes()
        for path in repo.rglob("*")
        if path.is_file() and ".git" not in path.parts
    )


def test_update_moves_the_pin_keeps_user_edits_and_leaves_tasks_alone(template, tmp_path):
    repo = render_old(template, tmp_path / "env", 8000)
    assert "harbor-openenv[server]==0.1.0" in (repo / "pyproject.toml").read_text()
    edits = user_edits(repo)
    tasks_before = tree_digest(repo / "tasks")

    result = update(repo)
    assert result.returncode == 0, result.stdout + result.stderr

    new_version = RUNTIME_VERSION
    pyproject = (repo / "pyproject.toml").read_text()
    assert f'"harbor-openenv[server]=={new_version}",' in pyproject
    assert "==0.1.0" not in pyproject + (repo / "Dockerfile").read_text()
    # v999.0.0 is the working tree, whose version is no release: the update built its wheel
    assert list((repo / "wheels").glob(f"harbor_openenv-{new_version}+src.*.whl"))
    assert f"_commit: {NEW}" in (repo / ".copier-answers.yml").read_text()
    for name, snippet in edits.items():
        assert snippet in (repo / name).read_text(), f"the user's edit of {name} was lost"
    assert tree_digest(repo / "tasks") == tasks_before
    assert no_conflict_markers(repo)
    assert "runtime_version" not in (repo / ".copier-answers.yml").read_text()


def test_explicit_pin_stays_and_can_be_changed_during_an_update(template, tmp_path):
    repo = tmp_path / "env"
    result = copier(
        "copy", "--trust", "--defaults", "--quiet", "--vcs-ref", OLD,
        "-d", f"dataset_path={EXAMPLE}", "-d", "runtime_pin=harbor-openenv>=0.1,<0.2",
        str(template), str(repo),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    git("init", "-q", "-b", "main", cwd=repo)
    commit_all(repo, "rendered")
    result = update(repo)
    assert result.returncode == 0, result.stderr
    assert '"harbor-openenv[server]>=0.1,<0.2"' in (repo / "pyproject.toml").read_text()
    commit_all(repo, "updated")

    result = update(repo, "-d", "runtime_pin=harbor-openenv==0.2.0")
    assert result.returncode == 0, result.stderr
    assert '"harbor-openenv[server]==0.2.0"' in (repo / "pyproject.toml").read_text()
    assert "runtime_pin: harbor-openenv==0.2.0" in (repo / ".copier-answers.yml").read_text()


def test_the_harness_answer_is_given_by_an_update_and_carried_by_the_next(template, tmp_path):
    """An environment rendered before the question existed answers it during an update
    (``-d harness_rollouts=true``): its runtime requirement gains the harness extra, and a later
    update with no answers keeps it (.copier-answers.yml has it)."""
    repo = render_old(template, tmp_path / "env", 8000)
    result = update(repo, "-d", "harness_rollouts=true")
    assert result.returncode == 0, result.stdout + result.stderr
    extra = f'"harbor-openenv[server,harness]=={RUNTIME_VERSION}",'
    assert extra in (repo / "pyproject.toml").read_text()
    assert "harness_rollouts: true" in (repo / ".copier-answers.yml").read_text()
    assert "This image carries it" in (repo / "README.md").read_text()
    commit_all(repo, "harness rollouts")
    result = update(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert extra in (repo / "pyproject.toml").read_text()
    assert "harness_rollouts: true" in (repo / ".copier-answers.yml").read_text()


def test_an_unknown_answer_key_is_refused_naming_the_closest_question(template, tmp_path):
    """copier drops an answer to no question silently (a misspelling would leave the answer it
    meant unchanged); the update refuses it in one line, exit 2, before anything is written."""
    repo = render_old(template, tmp_path / "env", 8000)
    before = tree_digest(repo)
    result = update(repo, "-d", "harnes_rollouts=true")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == (
        "harbor-openenv update: -d harnes_rollouts=true: harnes_rollouts is not a question of"
        " the template (did you mean harness_rollouts?)"
    ), result.stderr
    assert tree_digest(repo) == before
    assert not git("status", "--porcelain", cwd=repo).strip()


def test_a_real_conflict_is_reported_as_a_failure(template, tmp_path):
    repo = render_old(template, tmp_path / "env", 8000)
    pyproject = (repo / "pyproject.toml").read_text()
    # The user hand-edits the very line the template changes.
    pyproject = pyproject.replace(
        '"harbor-openenv[server]==0.1.0"', '"harbor-openenv[server]==0.1.0", "numpy"'
    )
    (repo / "pyproject.toml").write_text(pyproject)
    (repo / "Dockerfile").write_text("# ours\n" + (repo / "Dockerfile").read_text())
    commit_all(repo, "pin by hand")
    result = update(repo)
    assert result.returncode == 1, result.stdout + result.stderr
    conflicts = [line for line in result.stderr.splitlines() if line.startswith("conflict: ")]
    # each file once, with every reason; the Dockerfile's new first lines conflict with ours too
    assert conflicts == [
        "conflict: Dockerfile: conflict markers, unmerged",
        "conflict: pyproject.toml: conflict markers, unmerged",
    ], result.stderr
    assert "2 file(s) need a hand merge" in result.stderr
    assert "undo the whole update: git reset --hard && git clean -fd" in result.stderr
    assert not no_conflict_markers(repo)
    # the way back the message gives works: the repo is as it was before the update
    head = git("rev-parse", "HEAD", cwd=repo)
    subprocess.run("git reset --hard && git clean -fd", shell=True, cwd=repo, check=True)
    assert (
        git("status", "--porcelain", cwd=repo) == "" and git("rev-parse", "HEAD", cwd=repo) == head
    )
    assert f"_commit: {OLD}" in (repo / ".copier-answers.yml").read_text()


# A git for `copier update` that first records, in the folder copier's diff runs in, how many
# tasks/ files its index holds and (for the project's diff) the diff itself; then runs git, or
# stops at the first diff-tree with ACTION: "fail" (git fails, copier raises) or "kill" (copier
# itself gets SIGKILL, as a killed or interrupted update would).
GIT_SHIM = """#!/bin/sh
case " $* " in *" diff-tree "*)
    "$REAL_GIT" ls-files -- tasks | wc -l >> "$SHIM_LOG/tasks-in-render"
    case "$SHIM_ACTION" in
        fail) exit 1 ;;
        kill) kill -9 "$PPID"; exit 1 ;;
    esac
    case " $* " in *" --inter-hunk-context"*)
        "$REAL_GIT" "$@" | tee "$SHIM_LOG/diff"; exit ;;
    esac ;;
esac
exec "$REAL_GIT" "$@"
"""


def update_with_shim(repo: Path, tmp_path: Path, action: str) -> tuple[int, Path]:
    """`copier update` to NEW through GIT_SHIM; its exit code and the shim's log folder."""
    shim, log, temp = tmp_path / "shim", tmp_path / "shim-log", tmp_path / "copier-tmp"
    for folder in (shim, log, temp):
        folder.mkdir()
    (shim / "git").write_text(GIT_SHIM)
    (shim / "git").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
        "REAL_GIT": shutil.which("git") or "git",
        "SHIM_LOG": str(log),
        "SHIM_ACTION": action,
        "TMPDIR": str(temp),  # copier's renders: kept apart from other runs, and left here by kill
    }
    result = subprocess.run(
        [sys.executable, "-m", "copier", "update", "--trust", "--defaults", "--quiet"]
        + ["--vcs-ref", NEW],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return result.returncode, log


def committed_state(repo: Path) -> tuple[str, str, dict[str, tuple]]:
    """HEAD, the index entries under tasks/, and tasks/ on disk."""
    return (
        git("rev-parse", "HEAD", cwd=repo),
        git("ls-files", "--stage", "--", "tasks", cwd=repo),
        tree_digest(repo / "tasks"),
    )


@pytest.mark.parametrize("action", ["fail", "kill"])
def test_an_update_stopped_after_the_before_migration_leaves_the_dataset_tracked(
    template, tmp_path, action
):
    """The "before" migration gave copier's old render the tasks/ entries; the update then dies.
    The project's index was never touched: nothing staged, tasks/ tracked and unchanged, so a
    later `git commit -a` cannot drop the dataset."""
    repo = render_old(template, tmp_path / "env", 8000)
    before = committed_state(repo)
    code, log = update_with_shim(repo, tmp_path, action)
    assert code != 0
    # the migration had run: the render copier diffs in held every tasks/ file
    assert int((log / "tasks-in-render").read_text().split()[0]) == len(before[1].splitlines())
    assert git("diff", "--cached", "--name-status", cwd=repo) == ""
    assert committed_state(repo) == before
    assert not [
        line for line in git("status", "--porcelain", cwd=repo).splitlines() if "tasks" in line
    ]


def test_an_update_diffs_nothing_of_a_committed_dataset_and_leaves_it_as_committed(
    template, tmp_path
):
    """200 tasks committed: copier's diff of the project no longer carries tasks/ (the render
    holds the same tree), the update applies, and tasks/ stays byte for byte as committed."""
    dataset = tmp_path / "dataset"
    for i in range(200):
        write_task(dataset / "tasks" / f"group-{i // 50}" / f"task-{i:03d}")
    result = copier(
        "copy", "--trust", "--defaults", "--quiet", "--vcs-ref", OLD,
        "-d", f"dataset_path={dataset}", str(template), str(tmp_path / "env"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    repo = tmp_path / "env"
    git("init", "-q", "-b", "main", cwd=repo)
    commit_all(repo, "rendered")
    head, entries, files = committed_state(repo)
    assert len(entries.splitlines()) == 800

    code, log = update_with_shim(repo, tmp_path, "run")
    assert code == 0
    # the project's own changes since its render (tasks.sha256, README's dataset summary) only
    diffed = re.findall(r"^diff --git a/(\S+) ", (log / "diff").read_text(), re.MULTILINE)
    assert "tasks.sha256" in diffed and not [name for name in diffed if name.startswith("tasks/")]
    assert f"_commit: {NEW}" in (repo / ".copier-answers.yml").read_text()
    assert committed_state(repo) == (head, entries, files)
    assert git("status", "--porcelain", "--", "tasks", cwd=repo) == ""


@pytest.mark.docker
def test_updated_environment_builds_and_serves_the_new_runtime(
    template, tmp_path, docker_client, dependency_wheels
):
    """The same repo before and after the update, with one task edited by hand: the old
    runtime serves the edited task; the new one refuses it because it no longer matches
    tasks.sha256 (a check added after 0.1.0)."""
    from harbor_openenv.client import HarborEnvClient

    port = free_port()
    repo = render_old(template, tmp_path / "env", port)
    user_edits(repo)
    with (repo / "tasks" / "hello-world" / "instruction.md").open("a") as handle:
        handle.write("\nEdited by hand after rendering.\n")
    commit_all(repo, "edit a task by hand")

    old_source = tmp_path / "old-runtime"
    git("worktree", "add", "-q", str(old_source), OLD, cwd=template)
    old_wheel = build_runtime_wheel(old_source / "runtime", tmp_path / "old-wheel")
    new_wheel = build_runtime_wheel(template / "runtime", tmp_path / "new-wheel")
    images = []
    try:
        for wheel in (old_wheel, new_wheel):
            if wheel is new_wheel:
                for stale in (repo / "wheels").glob("*.whl"):
                    stale.unlink()
                result = update(repo)
                assert result.returncode == 0, result.stdout + result.stderr
            shutil.copy2(wheel, repo / "wheels" / wheel.name)
            add_wheels(dependency_wheels, repo / "wheels")
            images.append(build_offline(repo)[0])

        answers = []
        for image in images:
            with (
                serve_image(docker_client, image, port) as (url, _),
                HarborEnvClient(url, orchestration_token=TOKEN) as env,
            ):
                answers.append(env.reset(task_id="hello-world").observation.error)
                assert env.reset(task_id="word-count").observation.error is None
                assert env.evaluate().reward == 0.0
        old_error, new_error = answers
        assert old_error is None
        assert "do not match tasks.sha256" in new_error
        assert "changed: tasks/hello-world/instruction.md" in new_error
    finally:
        for image in images:
            docker_client.images.remove(image, force=True)
