"""How the tamper report classifies the engine's list of a container's changes
(episode/tamper.py). No engine: the real report is tests/hostile/test_tamper.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harbor_openenv.episode.tamper import DELETED, classify, hides_deletions, skipped
from harbor_openenv.sandbox.base import _unescape


def test_each_class_and_what_is_never_counted():
    changes = [
        ("/usr", 0), ("/usr/bin", 0), ("/usr/bin/cat", 0),  # a folder holding a change: skipped
        ("/etc/ld.so.preload", 1),
        ("/usr/lib/x86_64-linux-gnu/libhook.so", 1),
        ("/usr/lib/python3/dist-packages/zz.pth", 1),
        ("/usr/local/lib/python3.11/sitecustomize.py", 1),
        ("/root/conftest.py", 1),
        ("/root/.bashrc", 0),
        ("/etc/profile.d/x.sh", 1),
        ("/app/pytest.py", 1), ("/app/conftest.py", 1),  # the workdir: the agent's own
        ("/logs/agent/out.txt", 1), ("/tmp/x", 1), ("/tests/test.sh", 1),
        ("/var/cache/apt/x", 1),
    ]  # fmt: skip
    report = classify(changes, "/app")
    assert report.counts == {
        "executables": 1,
        "libraries": 2,
        "interpreter_hooks": 2,
        "pytest": 1,
        "shell_startup": 2,
    }
    assert report.suspect and report.paths["executables"] == ["/usr/bin/cat"]


def test_an_install_is_named_as_one_and_is_not_suspect():
    site = "/usr/local/lib/python3.11/site-packages"
    changes = [(f"{site}/requests/__init__.py", 1), (f"{site}/requests-2.0.dist-info/RECORD", 1)]
    changes += [("/usr/local/bin/normalizer", 1)]  # its entry point
    report = classify(changes, "/app")
    assert (report.counts, report.suspect) == ({"installs": 3}, False)
    replaced = classify([*changes, ("/usr/local/bin/python3", 0)], "/app")
    assert replaced.counts["executables"] == 1 and replaced.suspect  # an existing one, changed


def test_a_standard_library_module_is_a_library():
    report = classify([("/usr/lib/python3.11/json/decoder.py", 0)], "/app")
    assert report.counts == {"libraries": 1} and report.suspect


def test_the_keepers_walk_skips_what_is_never_counted():
    assert "/app" in skipped("/app/") and "/logs" in skipped("/app")
    assert "/" not in skipped("/")


def test_the_keepers_paths_are_unescaped():
    assert _unescape("/usr/bin/a\\040b\\012c\\134") == "/usr/bin/a b\nc\\"
    assert _unescape("/x\\377") == "/x\ufffd"


# A path in each class where a deletion can change what the verifier runs or loads.
DELETABLE = {
    "executables": ["/usr/bin/python3", "/bin/cat", "/usr/local/sbin/x"],
    "libraries": [
        "/etc/ld.so.cache",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/python3.11/json",
        "/usr/local/lib/python3.11/site-packages/pytest",  # so a workdir pytest.py wins
    ],
    "interpreter_hooks": ["/usr/lib/python3/dist-packages/distutils-precedence.pth"],
    "pytest": ["/usr/lib/python3/dist-packages/pytest_timeout.py", "/root/conftest.py"],
    "shell_startup": ["/etc/profile", "/root/.bashrc", "/etc/profile.d/a.sh"],
}


def test_deletions_are_reported_apart_in_the_same_classes():
    changes = [(path, DELETED) for paths in DELETABLE.values() for path in paths]
    report = classify([*changes, ("/usr/bin", 0), ("/app/x", DELETED)], "/app")
    assert report.counts == {}  # nothing written
    assert report.deleted == {name: len(paths) for name, paths in DELETABLE.items()}
    assert report.suspect and report.info()["deleted"]["paths"]["executables"] == sorted(
        DELETABLE["executables"]
    )


def test_an_upgrades_deletions_in_site_packages_are_an_install():
    site = "/usr/local/lib/python3.11/site-packages"
    upgrade = [(f"{site}/six-1.0.dist-info", DELETED), (f"{site}/six-2.0.dist-info", 1)]
    report = classify([*upgrade, (f"{site}/six-2.0.dist-info/RECORD", 1)], "/app")
    assert (report.deleted, report.suspect) == ({"installs": 1}, False)


SITE = "/usr/local/lib/python3.11/site-packages"
PLACES = {  # where a deleted name counts, and its class
    "executables": ["/usr/local/bin/{}", "/usr/bin/{}", "/bin/{}", "/usr/sbin/{}"],
    "libraries": [
        "/usr/lib/x86_64-linux-gnu/lib{}.so.1",
        "/usr/lib/python3.11/{}.py",
        SITE + "/{}",
    ],
    "interpreter_hooks": [SITE + "/{}.pth", "/usr/lib/python3/dist-packages/{}.pth"],
    "pytest": [SITE + "/pytest_{}.py", "/opt/{}/conftest.py"],
    "shell_startup": ["/home/{}/.bashrc", "/etc/profile.d/{}.sh"],
}


@given(
    st.sampled_from(sorted(PLACES)).flatmap(
        lambda name: st.tuples(st.just(name), st.sampled_from(PLACES[name]))
    ),
    st.text("abcxyz_-", min_size=1, max_size=8),
)
def test_a_deletion_is_seen_and_reported_in_its_class(place, name):
    """Any deleted name in a class's place: the keeper's view of it (its folder changed,
    nothing in it) sends the report to the engine's list, whose deletion is reported apart in
    that class, and the report is suspect (a site-packages module removed outright: a library)."""
    kind, pattern = place
    path = pattern.format(name)
    folder = path.rsplit("/", 1)[0]
    if not path.startswith("/opt/"):  # a conftest.py elsewhere: only the engine's list shows it
        assert hides_deletions([(folder, 0)], "/app"), path
    report = classify([(folder, 0), (path, DELETED)], "/app")
    assert (report.deleted, report.counts, report.suspect) == ({kind: 1}, {}, True), path


def test_the_keepers_list_shows_where_a_deletion_hides():
    """The keeper's walk names the folder a deleted entry left (changed, nothing in it
    changed): where an entry of it would count, the engine's list is asked for what went."""
    site = "/usr/local/lib/python3.11/site-packages"
    for folder in ("/usr/bin", "/etc", "/root", site, "/usr/lib/python3.11", f"{site}/pytest"):
        assert hides_deletions([("/usr", 0), (folder, 0)], "/app"), folder
    install = [(site, 0), (f"{site}/pkg", 0), (f"{site}/pkg/a.py", 0), (f"{site}/p.dist-info", 0)]
    install += [(f"{site}/p.dist-info/RECORD", 0), ("/usr/local/bin/p", 1)]
    assert not hides_deletions(install, "/app")  # an install's files are not folders it left
    assert not hides_deletions([("/var/log", 0), ("/app", 0), ("/opt/x", 0)], "/app")
    assert not hides_deletions([("/usr/bin", 0), ("/usr/bin/xargs", DELETED)], "/app")
