"""How the tamper report classifies the engine's list of a container's changes
(episode/tamper.py). No engine: the real report is tests/hostile/test_tamper.py."""

from __future__ import annotations

from harbor_openenv.episode.tamper import classify, skipped
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
