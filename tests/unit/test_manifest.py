"""harbor_openenv.datasets.manifest: byte-for-byte copy and sha256sum-compatible manifest."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from harbor_openenv.datasets import manifest as manifest_module
from harbor_openenv.datasets import task_copy
from harbor_openenv.datasets.manifest import (
    MANIFEST_NAME,
    file_sha256,
    read_manifest,
    read_modes,
    verify_manifest,
    write_manifest,
)
from harbor_openenv.datasets.task_copy import CopyError, copy_tasks


def make_tree(root: Path) -> Path:
    """A small dataset with the awkward cases: CRLF, binary, exec bit, Jinja text, links."""
    (root / "a" / "tests").mkdir(parents=True)
    (root / "a" / "task.toml").write_bytes(b"[verifier]\r\ntimeout_sec = 10\r\n")
    (root / "a" / "data.bin").write_bytes(bytes(range(256)) * 64)
    script = root / "a" / "tests" / "test.sh"
    script.write_bytes(b"#!/bin/bash\necho {{ x }}\n")
    script.chmod(0o755)
    (root / "a" / "foo.jinja").write_text("{% raw %}{{ y }}")
    (root / "a" / "empty").mkdir()
    (root / "a" / "link.toml").symlink_to("task.toml")
    (root / "nested" / "deep" / "b").mkdir(parents=True)
    (root / "nested" / "deep" / "b" / "task.toml").write_text("no newline at end")
    (root / "nested" / "deep" / "b" / "shared").symlink_to("../../../a/tests")
    return root


def snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir", stat.S_IMODE(st.st_mode))
        else:
            out[rel] = (
                "file",
                stat.S_IMODE(st.st_mode),
                hashlib.sha256(path.read_bytes()).digest(),
            )
    return out


def test_copy_is_byte_for_byte_with_modes_and_links(tmp_path):
    src = make_tree(tmp_path / "src")
    calls = []
    copy_tasks(
        src, tmp_path / "out" / "tasks", progress=lambda done, total: calls.append((done, total))
    )
    dst = tmp_path / "out" / "tasks"
    assert snapshot(dst) == snapshot(src)
    assert os.access(dst / "a" / "tests" / "test.sh", os.X_OK)
    assert (dst / "a" / "empty").is_dir()
    assert calls[-1] == (7, 7) and [d for d, _ in calls] == list(range(1, 8))
    assert not [p for p in (tmp_path / "out").iterdir() if p.name != "tasks"]  # no temp dir left


def test_copy_keeps_exact_modes_whatever_the_umask(tmp_path):
    src = make_tree(tmp_path / "src")
    (src / "a" / "group-writable").write_text("x")
    (src / "a" / "group-writable").chmod(0o664)
    (src / "a" / "locked").mkdir()
    (src / "a" / "locked" / "inside").write_text("y")
    (src / "a" / "locked").chmod(0o555)
    (src / "a" / "setuid").write_text("z")
    (src / "a" / "setuid").chmod(0o4755)
    (src / "a" / "setgid-dir").mkdir()
    (src / "a" / "setgid-dir").chmod(0o2750)
    old = os.umask(0o077)
    try:
        copy_tasks(src, tmp_path / "out" / "tasks")
    finally:
        os.umask(old)
    assert snapshot(tmp_path / "out" / "tasks") == snapshot(src)


def test_copy_digests_give_the_same_manifest_as_reading_the_copy(tmp_path):
    src = make_tree(tmp_path / "src")
    (src / "back\\slash").write_text("1")
    (src / "new\nline").write_text("2")
    (src / "a" / "link-to-link").symlink_to("link.toml")
    (src / "a" / "dangling").symlink_to("no-such-file")
    (src / "a" / "run").symlink_to("tests/test.sh")  # a link to an executable file
    env = tmp_path / "env"
    digests = copy_tasks(src, env / "tasks")
    assert digests["a/link-to-link"] == digests["a/link.toml"] == digests["a/task.toml"]
    assert "a/dangling" not in digests and "nested/deep/b/shared" not in digests
    # The execute bits come from the copy too (a link's are its target's, as sha256sum reads it).
    assert digests.executables == {"a/tests/test.sh", "a/run"}
    assert write_manifest(env / "tasks", env / "from-copy.sha256", digests) == len(digests) == 10
    write_manifest(env / "tasks", env / "from-files.sha256")
    from_copy = (env / "from-copy.sha256").read_text()
    assert "# +x tasks/a/run\n# +x tasks/a/tests/test.sh\n" in from_copy
    assert from_copy == (env / "from-files.sha256").read_text()
    # A manifest inside the folder it lists leaves itself out, either way.
    inner = env / "tasks" / "own.sha256"
    assert write_manifest(env / "tasks", inner, {**digests, "own.sha256": "0" * 64}) == 10
    written = inner.read_bytes()
    assert write_manifest(env / "tasks", inner) == 10 and inner.read_bytes() == written
    assert verify_manifest(inner) == []


def test_copy_into_empty_existing_dir(tmp_path):
    src = make_tree(tmp_path / "src")
    (tmp_path / "dst").mkdir()
    copy_tasks(src, tmp_path / "dst")
    assert snapshot(tmp_path / "dst") == snapshot(src)


def test_copy_refuses_non_empty_destination(tmp_path):
    src = make_tree(tmp_path / "src")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "x").write_text("x")
    with pytest.raises(CopyError, match="not an empty directory"):
        copy_tasks(src, tmp_path / "dst")


@pytest.mark.parametrize(
    "target, message",
    [("../../outside.txt", "points outside the dataset"), ("/etc/hostname", "absolute target")],
)
def test_copy_refuses_links_leaving_the_dataset(tmp_path, target, message):
    src = make_tree(tmp_path / "src")
    (tmp_path / "outside.txt").write_text("secret")
    (src / "a" / "evil").symlink_to(target)
    with pytest.raises(CopyError, match=message) as info:
        copy_tasks(src, tmp_path / "out" / "tasks")
    assert "a/evil" in str(info.value)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_failed_copy_leaves_nothing(tmp_path, monkeypatch):
    src = make_tree(tmp_path / "src")
    (tmp_path / "out").mkdir()
    real_copy = task_copy._copy_file
    calls = {"n": 0}

    def flaky(src, dst, buffer):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        return real_copy(src, dst, buffer)

    monkeypatch.setattr(task_copy, "_copy_file", flaky)
    with pytest.raises(OSError, match="disk full"):
        copy_tasks(src, tmp_path / "out" / "tasks")
    assert list((tmp_path / "out").iterdir()) == []


def test_manifest_is_sha256sum_compatible(tmp_path):
    src = make_tree(tmp_path / "src")
    copy_tasks(src, tmp_path / "env" / "tasks")
    manifest = tmp_path / "env" / MANIFEST_NAME
    count = write_manifest(tmp_path / "env" / "tasks", manifest)
    lines = [line for line in manifest.read_text().splitlines() if not line.startswith("#")]
    assert count == len(lines) == 6  # link.toml is hashed; the directory link is not
    names = [line.split("  ", 1)[1] for line in lines]
    assert names == sorted(names) and all(n.startswith("tasks/") for n in names)
    assert f"{file_sha256(src / 'a' / 'data.bin')}  tasks/a/data.bin" in lines
    if shutil.which("sha256sum"):
        run = subprocess.run(
            ["sha256sum", "--strict", "-c", MANIFEST_NAME],
            cwd=tmp_path / "env",
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stdout + run.stderr
    assert verify_manifest(manifest) == []


def test_manifest_escapes_odd_names_like_sha256sum(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "back\\slash").write_text("1")
    (tasks / "new\nline").write_text("2")
    manifest = tmp_path / MANIFEST_NAME
    assert write_manifest(tasks, manifest) == 2
    assert verify_manifest(manifest) == []
    if shutil.which("sha256sum"):
        run = subprocess.run(["sha256sum", "-c", MANIFEST_NAME], cwd=tmp_path, capture_output=True)
        assert run.returncode == 0, run.stdout + run.stderr


def test_verify_reports_changed_missing_extra(tmp_path):
    src = make_tree(tmp_path / "src")
    copy_tasks(src, tmp_path / "env" / "tasks")
    manifest = tmp_path / "env" / MANIFEST_NAME
    write_manifest(tmp_path / "env" / "tasks", manifest)
    tasks = tmp_path / "env" / "tasks"
    (tasks / "a" / "task.toml").write_bytes(b"[verifier]\ntimeout_sec = 10\n")  # CRLF -> LF
    (tasks / "a" / "data.bin").unlink()
    (tasks / "nested" / "new.txt").write_text("new")
    problems = verify_manifest(manifest)
    assert "missing: tasks/a/data.bin" in problems
    assert any(p.startswith("changed: tasks/a/task.toml") for p in problems)
    assert any(p.startswith("changed: tasks/a/link.toml") for p in problems)
    assert any(p.startswith("extra: tasks/nested/new.txt") for p in problems)
    assert len(problems) == 4


def test_verify_reports_missing_manifest_and_bad_lines(tmp_path):
    assert "manifest not found" in verify_manifest(tmp_path / MANIFEST_NAME)[0]
    (tmp_path / MANIFEST_NAME).write_text("nonsense\n")
    assert verify_manifest(tmp_path / MANIFEST_NAME) == [
        f"{MANIFEST_NAME} line 1: not a '<sha256>  <path>' line"
    ]


def test_big_file_hash_matches_hashlib(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(os.urandom(3 * (1 << 20) + 17))
    assert file_sha256(big) == hashlib.sha256(big.read_bytes()).hexdigest()


def test_verify_one_folder(tmp_path):
    tasks = tmp_path / "tasks"
    for name in ("a", "ab"):
        (tasks / name).mkdir(parents=True)
        (tasks / name / "task.toml").write_text(name)
    manifest = tmp_path / MANIFEST_NAME
    write_manifest(tasks, manifest)
    (tasks / "ab" / "task.toml").write_text("changed")
    (tasks / "a" / "new.txt").write_text("extra")
    assert verify_manifest(manifest, under="tasks/ab") == [
        "changed: tasks/ab/task.toml (sha256 differs from tasks.sha256)"
    ]
    assert verify_manifest(manifest, under="tasks/a") == [
        "extra: tasks/a/new.txt (not in tasks.sha256)"
    ]
    assert verify_manifest(manifest, under="tasks/zzz") == ["tasks/zzz: not in tasks.sha256"]


def test_manifest_records_executable_files_where_sha256sum_does_not_look(tmp_path):
    src = make_tree(tmp_path / "src")
    (src / "a" / "back\\slash.sh").write_text("odd name")
    (src / "a" / "back\\slash.sh").chmod(0o755)
    tasks = tmp_path / "env" / "tasks"
    copy_tasks(src, tasks)
    manifest = tmp_path / "env" / MANIFEST_NAME
    write_manifest(tasks, manifest)
    text = manifest.read_text()
    assert text.splitlines()[0] == manifest_module.MODES_HEADER
    assert "# +x tasks/a/tests/test.sh\n" in text
    assert read_modes(manifest) == {"tasks/a/tests/test.sh", "tasks/a/back\\slash.sh"}
    entries, problems = read_manifest(manifest)
    assert problems == [] and len(entries) == 7
    if shutil.which("sha256sum"):
        run = subprocess.run(
            ["sha256sum", "--strict", "-c", MANIFEST_NAME],
            cwd=tmp_path / "env",
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "improperly formatted" not in run.stderr

    (tasks / "a" / "tests" / "test.sh").chmod(0o644)
    (tasks / "a" / "task.toml").chmod(0o755)
    assert verify_manifest(manifest) == []  # bytes only, as a server checks at reset
    assert verify_manifest(manifest, modes=True) == [
        "mode changed: tasks/a/link.toml (not executable in tasks.sha256)",  # a link to task.toml
        "mode changed: tasks/a/task.toml (not executable in tasks.sha256)",
        "mode changed: tasks/a/tests/test.sh (executable in tasks.sha256)",
    ]
    assert manifest_module.main([str(manifest)]) == 1


def test_a_manifest_without_modes_still_verifies(tmp_path):
    tasks = tmp_path / "tasks"
    (tasks / "a").mkdir(parents=True)
    (tasks / "a" / "run.sh").write_text("echo")
    manifest = tmp_path / MANIFEST_NAME
    write_manifest(tasks, manifest)
    old = [line for line in manifest.read_text().splitlines(True) if not line.startswith("#")]
    manifest.write_text("".join(old))  # as written before modes were recorded
    (tasks / "a" / "run.sh").chmod(0o755)
    assert read_modes(manifest) is None
    assert verify_manifest(manifest, modes=True) == []
