"""Tamper evidence (episode/tamper.py): what the agent changed outside its workdir that the
verifier could run or import, reported in evaluate's info and the metrics, never acted on."""

from __future__ import annotations

import httpx
import pytest
from conftest import ROOT, Server

from harbor_openenv.episode.tamper import classify

EXAMPLES = ROOT / "examples" / "dataset" / "tasks"


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


@pytest.mark.docker
def test_the_routes_are_reported_and_the_oracles_of_the_examples_are_not(docker_client):
    """A replaced cat, a preload, a .pth hook and a shell profile (as root) show in evaluate's
    info without changing the reward; the oracle runs of the bundled examples show nothing
    suspect (false positives: 0 of 4)."""
    false_positives = []
    with Server(EXAMPLES) as srv, srv.client() as env:
        env.reset(task_id="hello-world")
        tampered = env.exec(
            "cp /bin/true /usr/bin/cat && echo /nowhere.so > /etc/ld.so.preload"
            " && d=$(python3 -c 'import site; print(site.getsitepackages()[0])')"
            ' && mkdir -p "$d" && echo "import os" > "$d/zz.pth"'
            " && echo 'echo hi' >> /etc/profile"
        )
        assert tampered.observation.exit_code == 0, tampered.observation
        result = env.evaluate()
        report = result.observation.info["tamper"]
        assert report["suspect"], report
        for kind in ("executables", "libraries", "interpreter_hooks", "shell_startup"):
            assert report["counts"].get(kind, 0) >= 1, (kind, report)
        assert "/usr/bin/cat" in report["paths"]["executables"]
        for task in ("hello-world", "fix-sum-bug", "word-count", "repo2env-style"):
            env.reset(task_id=task)
            env.solve()
            result = env.evaluate()
            assert result.reward == 1.0, (task, result.observation)
            if result.observation.info["tamper"]["suspect"]:
                false_positives.append((task, result.observation.info["tamper"]))
        scraped = httpx.get(srv.url + "/metrics", timeout=10).text
    assert false_positives == []
    assert 'harbor_openenv_tamper_evaluates_total{kind="executables"} 1.0' in scraped
    print("tamper report: 0 false positives in 4 oracle runs of the bundled examples")
