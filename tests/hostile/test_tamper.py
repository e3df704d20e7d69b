"""Tamper evidence (episode/tamper.py): what the agent changed outside its workdir that the
verifier could run or import, reported in evaluate's info and the metrics, never acted on."""

from __future__ import annotations

import httpx
import pytest
from _server import ROOT, Server

EXAMPLES = ROOT / "examples" / "dataset" / "tasks"


@pytest.mark.docker
def test_the_routes_are_reported_and_the_oracles_of_the_examples_are_not(docker_client):
    """A replaced cat, a preload, a .pth hook and a shell profile (as root) show in evaluate's
    info without changing the reward, and so do a deleted program, ld.so.cache and standard
    library package (apart, as deleted); the oracle runs of the bundled examples show nothing
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
        env.reset(task_id="hello-world")
        deleted = env.exec(  # each in a folder nothing else changed in: the keeper sees folders
            "rm /usr/bin/xargs /etc/ld.so.cache && rm -r /usr/lib/python3.11/json"
        )
        assert deleted.observation.exit_code == 0, deleted.observation
        report = env.evaluate().observation.info["tamper"]
        assert report["suspect"] and report["counts"] == {}, report
        assert report["deleted"]["counts"] == {"executables": 1, "libraries": 2}, report
        assert "/usr/bin/xargs" in report["deleted"]["paths"]["executables"]
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
    assert 'harbor_openenv_tamper_evaluates_total{kind="executables_deleted"} 1.0' in scraped
    print("tamper report: 0 false positives in 4 oracle runs of the bundled examples")
