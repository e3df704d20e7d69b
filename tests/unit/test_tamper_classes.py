"""How the tamper report classifies a container's changes by what the verifier of the image can
execute or import (episode/tamper.py, images/reach.py). No engine: the real report is
tests/hostile/test_tamper.py and test_tamper_routes.py."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from harbor_openenv.episode.tamper import (
    ADDED,
    DELETED,
    MODIFIED,
    SUSPECT,
    classify,
    hides_deletions,
    skipped,
)
from harbor_openenv.images.reach import GUESSED, Interpreter, Reach, Shipped, parse
from harbor_openenv.sandbox.base import _unescape

SITE = "/usr/local/lib/python3.12/site-packages"
PY = Interpreter(
    "/usr/local/bin/python3.12",
    ("/usr/local",),
    ("/usr/local/lib/python312.zip", "/usr/local/lib/python3.12", SITE),
    (SITE, "/root/.local/lib/python3.12/site-packages"),
)
SHIPPED = [
    "/usr/local/bin/python3.12",
    "/usr/bin/cat",
    "/usr/local/lib/python3.12/json/decoder.py",
    f"{SITE}/requests/__init__.py",
    f"{SITE}/requests",
    f"{SITE}/requests-2.0.dist-info/RECORD",
    "/opt/app/run.py",
    "/srv/tool/main.py",
    "/etc/hosts.allow",
    "/root/.bashrc",
    "/var/tmp/keep",
]
REACH = Reach(
    interpreters=(PY,),
    env=(("PYTHONPATH", "/opt/vendor"), ("BASH_ENV", "/etc/verifier-env.sh")),
    shipped=Shipped(SHIPPED),
)


def report_of(changes, reach=REACH):
    return classify(changes, "/app", reach)


def test_each_class_and_what_is_never_counted():
    changes = [
        ("/usr", 0), ("/usr/bin", 0), ("/usr/bin/cat", 0),  # a folder holding a change: skipped
        ("/etc/ld.so.preload", 1),
        ("/usr/lib/x86_64-linux-gnu/libhook.so", 1),
        (f"{SITE}/zz.pth", 1),
        ("/usr/local/lib/python3.12/sitecustomize.py", 1),
        ("/root/conftest.py", 1),
        ("/root/.bashrc", 0),
        ("/etc/profile.d/x.sh", 1),
        ("/etc/hosts.allow", 0),  # an image file changed in place, in no other class
        ("/app/pytest.py", 1), ("/app/conftest.py", 1),  # the workdir: the agent's own
        ("/logs/agent/out.txt", 1), ("/tests/test.sh", 1), ("/proc/1/x", 1),
        ("/tmp/x", 1), ("/var/cache/apt/x", 1),  # added where nothing reaches: reported
    ]  # fmt: skip
    report = report_of(changes)
    assert report.counts == {
        "executables": 1,
        "libraries": 2,
        "interpreter_hooks": 2,
        "pytest": 1,
        "shell_startup": 2,
        "image_files": 1,
        "other": 2,
    }
    assert report.suspect and report.paths["executables"] == ["/usr/bin/cat"]
    assert not report_of([("/tmp/x", 1), ("/var/cache/apt/x", 1)]).suspect


def test_kinds_come_from_what_the_image_shipped():
    """The keeper names every entry changed: the image's list tells added from changed in
    place, whatever kind the list gave."""
    report = report_of([("/opt/app/run.py", ADDED), ("/opt/app/new.txt", MODIFIED)])
    assert report.counts == {"image_files": 1, "other": 1}
    assert report.paths["image_files"] == ["/opt/app/run.py"]


def test_the_blind_classes_of_round_three_are_reported():
    """What classing by folder names missed (issue #34)."""
    cases = {
        "/opt/vendor/json.py": "libraries",  # PYTHONPATH=/opt/vendor in the image's Env
        "/opt/app/run.py": "image_files",  # code test.sh runs, changed in place
        "/srv/tool/helpers.py": "image_files",  # a module added beside a script run there
        f"{SITE}/requests/__init__.py": "libraries",  # an installed module edited in place
        "/usr/local/bin/pyvenv.cfg": "interpreter_hooks",  # beside the interpreter
        "/usr/local/pyvenv.cfg": "interpreter_hooks",  # above it
        "/usr/local/bin/python312._pth": "interpreter_hooks",
        "/root/.local/lib/python3.12/site-packages/x.py": "libraries",  # the user site, made
        "/var/tmp/keep": "image_files",  # no folder is ignored that the verifier could read
        "/etc/verifier-env.sh": "shell_startup",  # BASH_ENV
        "/pytest.ini": "pytest",  # pytest's configuration, found from the rootdir up
    }
    for path, kind in cases.items():
        report = report_of([(path, ADDED)])
        assert report.counts == {kind: 1} and report.suspect, (path, report)


def test_a_new_program_is_an_install_only_beside_its_metadata():
    """A new program on PATH beside any site-packages-looking path is an executable; beside an
    install's metadata in a real site folder, the install's entry point."""
    fake = report_of([("/var/site-packages/x", ADDED), ("/usr/local/bin/tool", ADDED)])
    assert fake.counts == {"other": 1, "executables": 1} and fake.suspect
    info = f"{SITE}/tool-1.0.dist-info"
    install = [(f"{SITE}/tool/__init__.py", ADDED), (f"{info}/RECORD", ADDED)]
    install += [("/usr/local/bin/tool", ADDED), (f"{SITE}/tool/__pycache__/x.pyc", ADDED)]
    report = report_of(install)
    assert (report.counts, report.suspect) == ({"installs": 4}, False)
    replaced = report_of([*install, ("/usr/local/bin/python3.12", MODIFIED)])
    assert replaced.counts["executables"] == 1 and replaced.suspect  # the image's, changed
    no_metadata = report_of(install[:1] + install[2:])
    assert no_metadata.counts == {"libraries": 2, "executables": 1}


def test_an_in_place_edit_is_an_install_only_in_an_upgrade():
    upgrade = [
        (f"{SITE}/requests-2.0.dist-info", DELETED),
        (f"{SITE}/requests-3.0.dist-info/RECORD", ADDED),
        (f"{SITE}/requests/__init__.py", MODIFIED),
        (f"{SITE}/requests/old.py", DELETED),
    ]
    report = report_of(upgrade)
    assert (report.counts, report.deleted, report.suspect) == (
        {"installs": 2},
        {"installs": 2},
        False,
    )
    beside = report_of(upgrade[1:3])  # an install beside, the image's module edited in place
    assert beside.counts == {"installs": 1, "libraries": 1} and beside.suspect
    alone = report_of([(f"{SITE}/requests/__init__.py", MODIFIED)])
    assert alone.counts == {"libraries": 1} and alone.suspect


def test_the_guess_without_a_probe_is_strict():
    """No probe (Harbor's backends): the standard layouts, nothing known shipped: the list's
    kinds stand and an unlisted change in place is an image file."""
    report = classify(
        [("/usr/lib/python3.11/json/decoder.py", 0), ("/opt/x/run.py", 0), ("/opt/y", 1)],
        "/app",
        GUESSED,
    )
    assert report.counts == {"libraries": 1, "image_files": 1, "other": 1}


def test_the_keepers_walk_skips_what_is_never_counted():
    assert "/app" in skipped("/app/") and "/logs" in skipped("/app")
    assert "/" not in skipped("/") and "/tmp" not in skipped("/app")
    assert "/run" not in skipped("/app") and "/var/tmp" not in skipped("/app")


def test_the_keepers_paths_are_unescaped():
    assert _unescape("/usr/bin/a\\040b\\012c\\134") == "/usr/bin/a b\nc\\"
    assert _unescape("/x\\377") == "/x\ufffd"


def test_the_probes_output_is_read():
    line = json.dumps(
        ["/opt/venv/bin/python", "/opt/venv", "/usr", ["/usr/lib/python3.12"], [], ""]
    )
    output = f"noise\n@@harbor-openenv-reach {line}\n@@harbor-openenv-reach-files\n".encode()
    reach = parse(
        ["PATH=/opt/venv/bin:/usr/bin", "LD_PRELOAD=/a.so /b.so", "X=/y"], output + b"/a\0/b/c\0"
    )
    assert reach.path_dirs[:2] == ("/opt/venv/bin", "/usr/bin")
    assert {"/opt/venv/bin", "/opt/venv"} <= set(reach.interpreter_dirs)  # beside, above
    assert reach.named() == [("/a.so", "libraries"), ("/b.so", "libraries")]
    assert reach.shipped is not None and "/b/c" in reach.shipped and "/b" not in reach.shipped
    assert reach.shipped.holds("/b") and not reach.shipped.holds("/c")
    assert parse([], b"").shipped is None
    with_env = reach.with_env({"PATH": "/v/bin", "PYTHONPATH": "/v/lib", "HOME": "/root"})
    assert with_env.path_dirs[0] == "/v/bin" and "/v/lib" in with_env.import_roots


# A path in each class where a deletion can change what the verifier runs or loads.
DELETABLE = {
    "executables": ["/usr/bin/python3", "/bin/cat", "/usr/local/sbin/x"],
    "libraries": [
        "/etc/ld.so.cache",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/python3.11/json",
        f"{SITE}/pytest",  # so a workdir pytest.py wins
    ],
    "interpreter_hooks": [f"{SITE}/distutils-precedence.pth"],
    "pytest": [f"{SITE}/pytest_timeout.py", "/root/conftest.py"],
    "shell_startup": ["/etc/profile", "/root/.bashrc", "/etc/profile.d/a.sh"],
    "image_files": ["/opt/app/run.py", "/srv/x"],
}


def test_deletions_are_reported_apart_in_the_same_classes():
    changes = [(path, DELETED) for paths in DELETABLE.values() for path in paths]
    report = report_of([*changes, ("/usr/bin", 0), ("/app/x", DELETED)])
    assert report.counts == {}  # nothing written
    assert report.deleted == {name: len(paths) for name, paths in DELETABLE.items()}
    assert report.suspect and report.info()["deleted"]["paths"]["executables"] == sorted(
        DELETABLE["executables"]
    )


PLACES = {  # where a changed, added, deleted or shadowing name counts, and its class
    "executables": ["/usr/local/bin/{}", "/usr/bin/{}", "/bin/{}", "/usr/sbin/{}"],
    "libraries": [
        "/usr/lib/x86_64-linux-gnu/lib{}.so.1",
        "/usr/local/lib/python3.12/{}.py",
        SITE + "/{}",
        "/opt/vendor/{}.py",
    ],
    "interpreter_hooks": [SITE + "/{}.pth", "/usr/local/lib/python3.12/{}/sitecustomize.py"],
    "pytest": [SITE + "/pytest_{}.py", "/opt/{}/conftest.py"],
    "shell_startup": ["/home/{}/.bashrc", "/etc/profile.d/{}.sh"],
    "image_files": ["/opt/app/run.py", "/srv/tool/main.py"],
}


@given(
    st.sampled_from(sorted(PLACES)).flatmap(
        lambda name: st.tuples(st.just(name), st.sampled_from(PLACES[name]))
    ),
    st.text("abcxyz_-", min_size=1, max_size=8),
    st.sampled_from([ADDED, MODIFIED, DELETED]),
)
def test_every_change_in_a_reachable_place_is_suspect(place, name, kind):
    """Any name in a class's place, added, changed or deleted, is reported in that class and
    is suspect (an image file: changed or deleted, as only a shipped path can be); a deletion
    hidden from the keeper's walk (its folder changed, nothing in it) sends the report to the
    engine's list."""
    cls, pattern = place
    path = pattern.format(name)
    if cls == "image_files" and kind == ADDED:
        kind = MODIFIED  # shipped: the image's list makes it so whatever the list said
    reach = Reach(interpreters=(PY,), env=REACH.env, shipped=Shipped([*SHIPPED, path]))
    folder = path.rsplit("/", 1)[0]
    if kind == DELETED:
        assert hides_deletions([(folder, 0)], "/app", reach), path
    report = report_of([(folder, 0), (path, kind)], reach)
    found = report.deleted if kind == DELETED else report.counts
    assert found == {cls: 1} and report.suspect, (path, kind, report)
    assert cls in SUSPECT


def test_the_keepers_list_shows_where_a_deletion_hides():
    """The keeper's walk names the folder a deleted entry left (changed, nothing in it
    changed): where the image shipped something in it, the engine's list is asked."""
    for folder in ("/usr/bin", "/opt/app", SITE, "/usr/local/lib/python3.12/json"):
        assert hides_deletions([("/usr", 0), (folder, 0)], "/app", REACH), folder
    install = [(SITE, 0), (f"{SITE}/pkg", 0), (f"{SITE}/pkg/a.py", 0)]
    assert not hides_deletions(install, "/app", REACH)  # changes in it: not a folder left
    assert not hides_deletions([("/var/log", 0), ("/app", 0), ("/tmp", 0)], "/app", REACH)
    assert not hides_deletions([("/usr/bin", 0), ("/usr/bin/xargs", DELETED)], "/app", REACH)
    assert hides_deletions([("/anything", 0)], "/app", GUESSED)  # nothing known: ask
