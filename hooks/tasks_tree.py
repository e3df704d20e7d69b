"""Copier migration (before every update): give copier's render of the old version our tasks/ tree.

Run by copier inside the project, as the "before" migration of every `copier update`:

    python hooks/tasks_tree.py --answers-file .copier-answers.yml

`copier update` renders the old template version into a temporary folder (named
``copier._main.old_copy.*``), runs the "before" migrations, then commits that render (`git init`,
`git add .`, `git commit -am`, borrowing the project's objects as git alternates) and diffs the
commit against `git write-tree` of the project. tasks/ is never rendered, so the whole dataset went
through that diff and `git apply` as added files (about 1.3 s on 2,000 tasks, 200 MB).

This puts the project's index entries under tasks/ (`git ls-files --stage`: what write-tree will
see) into a new git index in that render, flagged skip-worktree so that `git add .` and
`commit -a` keep them without files on disk: the render's tree then holds the project's very
tasks/ tree object, which the diff skips by its hash.

It only reads the project (rev-parse, ls-files, the answers file) and writes only inside copier's
temporary render, so no failure, interruption or conflict of the update can change the project's
index. When it cannot tell the render (none, or several: updates of identical projects at once)
or git fails, it leaves the render as it was and copier takes its usual, slower diff.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

# copier's TemporaryDirectory(prefix=f"{__name__}.old_copy.") (copier._main, formerly copier.main)
RENDER_PATTERN = "copier*.old_copy.*"


def git(*args: str, cwd: Path, stdin: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=cwd, input=stdin, capture_output=True, check=True
    ).stdout


def old_render(prefix: str, answers_file: str, answers: bytes) -> Path | None:
    """copier's render of the old version for this update, not committed yet, or None.

    It is the one such folder of ours whose answers file (under the project's path inside its git
    repository, ``prefix``) is this project's, byte for byte.
    """
    found = []
    for folder in Path(tempfile.gettempdir()).glob(RENDER_PATTERN):
        try:
            if (
                folder.stat().st_uid == os.getuid()
                and not (folder / ".git").exists()
                and (folder / prefix / answers_file).read_bytes() == answers
            ):
                found.append(folder)
        except OSError:
            continue
    return found[0] if len(found) == 1 else None


def share_tasks_tree(project: Path, answers_file: str) -> bool:
    """Put the project's tasks/ index entries into copier's old render; True if done."""
    prefix = git("rev-parse", "--show-prefix", cwd=project).decode().strip()
    render = old_render(prefix, answers_file, (project / answers_file).read_bytes())
    if render is None:
        return False
    entries = git("ls-files", "--stage", "-z", "--full-name", "--", "tasks", cwd=project)
    if not entries:
        return False
    objects = git("rev-parse", "--path-format=absolute", "--git-path", "objects", cwd=project)
    paths = b"".join(entry.split(b"\t", 1)[1] + b"\0" for entry in entries.split(b"\0") if entry)
    try:
        git("init", "--quiet", cwd=render)
        (render / ".git" / "objects" / "info" / "alternates").write_bytes(objects)
        git("update-index", "-z", "--index-info", cwd=render, stdin=entries)
        git("update-index", "-z", "--skip-worktree", "--stdin", cwd=render, stdin=paths)
    except BaseException:
        shutil.rmtree(render / ".git", ignore_errors=True)  # copier's usual path, as if never run
        raise
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers-file", default=".copier-answers.yml")
    args = parser.parse_args(argv)
    # On failure, copier's usual, slower diff: the update is the same.
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        share_tasks_tree(Path.cwd(), args.answers_file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
