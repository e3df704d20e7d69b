"""``copier update`` for an environment repo, with the checks copier leaves to its users.

copier exits 0 even when its three-way merge left conflict markers or ``.rej`` files behind; an
update is only done when none remain. And copier answers a bad ``-d`` value, a hand-broken answers
file, an unknown ``_commit`` or a template that moved with a traceback of 50 to 90 lines; here each
is one line saying what is wrong and what to do.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harbor_openenv.cli.common import EXIT_OK, EXIT_PROBLEMS, UsageError
from harbor_openenv.errors import HarborOpenEnvError

# The markers copier's inline conflict mode writes (git merge-file with these labels).
CONFLICT_MARKERS = ("<<<<<<< before updating", ">>>>>>> after updating")
ANSWERS = ".copier-answers.yml"
# The template's questions whose answers must be whole numbers (copier casts before validating).
INT_QUESTIONS = ("port", "max_concurrent_envs")
UNDO = "git reset --hard && git clean -fd"


class UpdateError(HarborOpenEnvError):
    """copier could not run, or its update failed; the message says why and what to do."""


def _is_url(src: str) -> bool:
    return "://" in src or src.startswith(("git@", "gh:", "gl:"))


def check_answers(repo: Path, data: Sequence[str] = ()) -> dict[str, Any]:
    """The answers file's data, or an UpdateError naming what copier would choke on."""
    import yaml  # a copier dependency

    path = repo / ANSWERS
    try:
        answers = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UpdateError(f"{repo}: no {ANSWERS}; not a repo rendered by the template") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UpdateError(
            f"{ANSWERS} is not valid YAML{where}: fix it, or restore it with"
            f" `git checkout -- {ANSWERS}`"
        ) from None
    if not isinstance(answers, dict) or not answers.get("_src_path") or not answers.get("_commit"):
        raise UpdateError(
            f"{ANSWERS} lacks _src_path or _commit (copier writes both): restore it with"
            f" `git checkout -- {ANSWERS}`"
        )
    src = str(answers["_src_path"])
    if not _is_url(src):
        if not Path(src).expanduser().is_absolute():
            raise UpdateError(
                f"{ANSWERS} has the relative template path _src_path: {src}, which copier cannot"
                " find again: set it to the template's absolute path or git URL, then commit"
            )
        if not Path(src).expanduser().is_dir():
            raise UpdateError(
                f"the template {src} (_src_path in {ANSWERS}) does not exist: set _src_path to"
                " where the template is now (an absolute path or its git URL), then commit"
            )
    given: dict[str, str] = {}
    for item in data:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UpdateError(f"-d {item}: write it as KEY=VALUE, e.g. -d port=8000")
        given[key.strip()] = value
    for key in INT_QUESTIONS:
        checks: tuple[tuple[str, object], ...] = (
            (f"-d {key}=", given.get(key)),
            (f"{ANSWERS}: {key}: ", answers.get(key)),
        )
        for origin, answer in checks:
            if answer is not None and not re.fullmatch(r"\s*\d+\s*", str(answer)):
                raise UpdateError(f"{origin}{answer} is not a whole number: give one, e.g. 8000")
    return answers


def explain_failure(output: str, answers: dict[str, Any]) -> str:
    """One line for copier's failure, from the traceback's last lines."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    text = "\n".join(lines[-6:])
    found = re.search(r"Validation error for question '([^']+)': (.*)", text)
    if found:
        return f"the answer to {found.group(1)} is refused: {found.group(2)}"
    if "Unknown revision" in text or "unknown revision" in text:
        return (
            f"{ANSWERS} records _commit: {answers.get('_commit')}, which the template at"
            f" {answers.get('_src_path')} does not have (rendered from an uncommitted or rewritten"
            " template?): set _commit to a tag it has and commit, or re-render with"
            " `copier recopy --trust --defaults`"
        )
    if "is dirty" in text:
        return "the repo has uncommitted changes: commit them (git add -A && git commit) first"
    if "only supported in git-tracked templates" in text:
        return (
            f"the template at {answers.get('_src_path')} is not a git repository: set _src_path"
            f" in {ANSWERS} to the template's git URL or checkout"
        )
    if "downgrad" in text.lower():
        return f"{text.splitlines()[-1]}: pass a newer --vcs-ref"
    last = lines[-1] if lines else "no output"
    return f"copier update failed: {last}"


def check_keys(answers: dict[str, Any], vcs_ref: str | None, data: Sequence[str]) -> None:
    """An UpdateError for a ``-d`` key that is no question of the template at ``vcs_ref`` (copier
    would drop it silently), naming the closest one. Skipped when the template cannot be read
    (copier's own error then says why)."""
    if not data:
        return
    from copier._template import Template  # the questions as copier reads them (a git checkout)

    template = Template(url=str(answers["_src_path"]), ref=vcs_ref)
    try:
        questions = template.questions_data
    except Exception:  # an unreachable template: copier update says so
        return
    finally:
        template._cleanup()
    asked = sorted(key for key, spec in questions.items() if spec.get("when") is not False)
    for item in data:
        key = item.partition("=")[0].strip()
        if key in asked:
            continue
        if key in questions:
            raise UpdateError(f"-d {item}: {key} is computed by the template, not a question")
        close = difflib.get_close_matches(key, asked, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else f"; the questions: {', '.join(asked)}"
        raise UpdateError(f"-d {item}: {key} is not a question of the template{hint}")


def check_runtime_pin(repo: Path, data: Sequence[str]) -> None:
    """An UpdateError when ``-d runtime_pin=...`` names a runtime that is not there (in the
    repo's ``wheels/``, on the package index, at the git URL, as a wheel file); a warning on
    stderr when it could not be checked (offline)."""
    from harbor_openenv.cli.pins import PinError, check_pin

    for item in data:
        key, _, value = item.partition("=")
        if key.strip() != "runtime_pin" or not value.strip():
            continue
        pin = value.strip()
        if pin.endswith(".whl") and not Path(pin).expanduser().is_absolute():
            pin = str(repo / pin)  # copier runs in the repo: relative to it
        try:
            note = check_pin(pin, repo / "wheels")
        except PinError as exc:
            raise UpdateError(str(exc)) from None
        if note:
            print(f"harbor-openenv update: warning: {note}", file=sys.stderr)


def run_copier_update(repo: Path, vcs_ref: str | None = None, data: Sequence[str] = ()) -> None:
    """Run ``copier update`` in ``repo`` keeping earlier answers (``data``: KEY=VALUE changes)."""
    try:
        import copier  # noqa: F401 - only to say clearly that it is missing
    except ImportError:
        raise UpdateError(
            "copier is not installed here: pip install copier (or: uv run --with copier ...)"
        ) from None
    answers = check_answers(repo, data)
    check_keys(answers, vcs_ref, data)
    check_runtime_pin(repo, data)
    command = [sys.executable, "-m", "copier", "update", "--trust", "--defaults"]
    command += ["--conflict", "inline"]
    if vcs_ref:
        command += ["--vcs-ref", vcs_ref]
    for item in data:
        command += ["--data", item]
    result = subprocess.run(command, cwd=repo, check=False, capture_output=True, text=True)
    if result.returncode != 0:
        raise UpdateError(explain_failure(result.stderr + result.stdout, answers))
    sys.stderr.write(result.stderr)
    sys.stdout.write(result.stdout)


def find_conflicts(repo: Path) -> list[str]:
    """Files an update left unmerged, one line each: ``path: why`` (git's unmerged paths,
    conflict markers, ``*.rej`` files)."""
    unmerged = subprocess.run(
        ["git", "diff", "--name-only", "--diff-filter=U", "-z"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split("\0")
    found: dict[str, list[str]] = {}
    for path in filter(None, unmerged):
        found.setdefault(path, []).append("unmerged")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in dict.fromkeys(listed):  # an unmerged path is listed once per stage
        if not raw or raw.startswith((b"tasks/", b"wheels/")):  # never part of an update's merge
            continue
        name = raw.decode(errors="surrogateescape")
        file = repo / name
        if name.endswith(".rej"):
            found.setdefault(name, []).append("rejected hunks")
        elif file.is_file() and not file.is_symlink():
            text = file.read_bytes()
            if any(marker.encode() in text for marker in CONFLICT_MARKERS):
                found.setdefault(name, []).insert(0, "conflict markers")
    return [f"{name}: {', '.join(why)}" for name, why in sorted(found.items())]


def conflict_advice(count: int) -> str:
    """What to do about ``count`` conflicted files: finish the merge, or undo the update."""
    return (
        f"{count} file(s) need a hand merge: edit the blocks between '{CONFLICT_MARKERS[0]}' and"
        f" '{CONFLICT_MARKERS[1]}', then git add -A && git commit; or undo the whole update:"
        f" {UNDO} (your committed work and git-ignored files such as .env stay)"
    )


def cmd_update(args: argparse.Namespace) -> int:
    repo = args.repo.resolve()
    try:
        run_copier_update(repo, args.vcs_ref, args.data or [])
    except UpdateError as exc:
        raise UsageError(str(exc)) from None
    conflicts = find_conflicts(repo)
    for line in conflicts:
        print(f"conflict: {line}", file=sys.stderr)
    if conflicts:
        print(conflict_advice(len(conflicts)), file=sys.stderr)
        return EXIT_PROBLEMS
    print("updated without conflicts; rebuild the image", file=sys.stderr)
    return EXIT_OK
