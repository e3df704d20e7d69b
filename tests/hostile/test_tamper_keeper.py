"""The keeper's changes (``helper keep``'s ``changes``, ``Sandbox.changes_since_mark``): what the
agent changed since the baseline, found by inode change times in the folders the container wrote,
against tricks that hide a change from a listing by modification times or by name; and, on the
same container, everything the engine's list reports suspect is reported by the keeper too."""

from __future__ import annotations

import time

import pytest

from harbor_openenv.episode import tamper

pytestmark = pytest.mark.docker

WORKDIR = "/app"
LIB = "/usr/lib/python3.11"
# Each trick, run after the baseline as root, and a path the report must name with its class.
TRICKS = {
    "an in-place write, its mtime set back": (
        f"echo 'x = 1' >> {LIB}/json/decoder.py && touch -d 2001-01-01 {LIB}/json/decoder.py",
        f"{LIB}/json/decoder.py",
        "libraries",
    ),
    "a file renamed into place from the workdir": (
        "cp /bin/true /app/cat && touch -d 2001-01-01 /app/cat && mv /app/cat /usr/bin/cat",
        "/usr/bin/cat",
        "executables",
    ),
    "a write through a hard link made in the workdir": (
        "ln /usr/bin/head /app/h && cat /bin/true > /app/h",
        "/usr/bin/head",
        "executables",
    ),
    "a folder replaced by a symlink": (
        f"mv {LIB}/email /app/email && ln -s /app/email {LIB}/email",
        f"{LIB}/email",
        "libraries",
    ),
    "a mode change alone": ("chmod u+s /usr/bin/tail", "/usr/bin/tail", "executables"),
    "a hook 80 folders deep": (
        "cd /usr/local/lib && for i in $(seq 80); do mkdir d && cd d; done && : > x.pth",
        "/usr/local/lib/d",
        "libraries",
    ),
    "a name that looks like a skipped folder": (
        "mkdir -p /apps /tmpx && : > /apps/sitecustomize.py && : > /tmpx/usercustomize.py",
        "/apps/sitecustomize.py",
        "interpreter_hooks",
    ),
    "a name with a space and a newline": (
        "printf x > '/usr/bin/a b\nc'",
        "/usr/bin/a b\nc",
        "executables",
    ),
    "a file in a folder written before the baseline": (
        "echo more >> /opt/shared/sitecustomize.py",
        "/opt/shared/sitecustomize.py",
        "interpreter_hooks",
    ),
}


@pytest.fixture
def box(docker_client):
    """A container of python:3.12-slim (Debian's python3.11) whose /opt/shared (world-writable)
    and the workdir were written before the baseline."""
    from harbor_openenv.sandbox import remove_containers
    from harbor_openenv.sandbox.spec import ContainerSpec
    from harbor_openenv.sandbox.starter import DockerStarter

    owner = f"test-tamper-keeper-{time.monotonic_ns()}"
    backend = DockerStarter(lambda: docker_client, owner=owner)
    sandbox = backend.start(ContainerSpec("python:3.12-slim", network="none"), task_id="keeper")
    try:
        made = sandbox.exec_root(
            "mkdir -m 777 /app /opt/shared && : > /opt/shared/sitecustomize.py"
            " && chmod 666 /opt/shared/sitecustomize.py"
        )
        assert made.exit_code == 0, made.output
        sandbox.workdir = WORKDIR
        time.sleep(0.05)  # a coarse clock tick: the writes above come before the mark
        sandbox.mark_baseline()
        yield sandbox
    finally:
        sandbox.remove()
        remove_containers(docker_client, owner=owner)


def suspects(changes, monkeypatch) -> set[tuple[str, str]]:
    """Every (class, path) the report of ``changes`` counts, not only the first few shown."""
    monkeypatch.setattr(tamper, "SHOWN", 10_000)
    report = tamper.classify(changes, WORKDIR)
    return {(kind, path) for kind, paths in report.paths.items() for path in paths}


def keeper_changes(box):
    return box.changes_since_mark(tamper.skipped(WORKDIR))


def test_nothing_changed_nothing_reported(box):
    assert keeper_changes(box) == []


@pytest.mark.parametrize("trick", TRICKS)
def test_each_trick_is_reported(box, trick, monkeypatch):
    script, path, kind = TRICKS[trick]
    run = box.exec_root(script)
    assert run.exit_code == 0, run.output
    found = suspects(keeper_changes(box), monkeypatch)
    # the hook past the walk's depth is named by the deepest folder it entered
    assert any(k == kind and (p == path or p.startswith(path + "/")) for k, p in found), found


def test_as_nobody_too(box, monkeypatch):
    """An unprivileged agent can write only where the image lets it: that is reported too."""
    run = box.exec(
        "echo 'import os' >> /opt/shared/sitecustomize.py",
        timeout_s=30,
        max_output=4096,
        user="nobody",
    )
    assert run.exit_code == 0, run.output
    found = suspects(keeper_changes(box), monkeypatch)
    assert ("interpreter_hooks", "/opt/shared/sitecustomize.py") in found, found


def test_the_keeper_reports_what_the_engine_reports(box, monkeypatch):
    """Every trick at once: each (class, path) the engine's list counts (deletions aside, which
    the keeper names by their folder, and the deep hook, whose deepest folder it names), the
    keeper's walk counts too."""
    for script, _, _ in TRICKS.values():
        run = box.exec_root(script)
        assert run.exit_code == 0, run.output
    engine = box.changes()
    assert engine is not None
    deep = "/usr/local/lib/d"
    added_or_changed = [(p, kind) for p, kind in engine if kind != 2 and not p.startswith(deep)]
    expected = suspects(added_or_changed, monkeypatch)
    found = suspects(keeper_changes(box), monkeypatch)
    assert expected <= found, expected - found
    assert len(expected) >= len(TRICKS), expected


def test_without_a_keeper_answer_the_engine_is_asked(box, monkeypatch):
    """A keeper that cannot answer (none, or too many changes) leaves the engine's list."""
    box.exec_root("cp /bin/true /usr/bin/cat")

    def no_keeper(request, *, timeout_s):
        from harbor_openenv.sandbox import SandboxError

        raise SandboxError("no keeper")

    monkeypatch.setattr(box, "ask_keeper", no_keeper)
    assert ("/usr/bin/cat", 0) in keeper_changes(box)
