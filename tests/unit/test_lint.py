"""The shadowing lint (tasks/lint.py, printed by validate): what a task's test.sh runs that the
agent can shadow from its working directory. No engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.lint import shadowing, system_state, workdir_of

ROOT = Path(__file__).resolve().parents[2]


def task(root: Path, name: str, test_sh: str, toml: str = "", workdir: str = "/app") -> Path:
    folder = root / name
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text(f"FROM debian\nWORKDIR {workdir}\n")
    (folder / "tests").mkdir()
    (folder / "tests" / "test.sh").write_text("#!/bin/bash\n" + test_sh)
    (folder / "instruction.md").write_text("do it\n")
    (folder / "task.toml").write_text('schema_version = "1.4"\n' + toml)
    return folder


@pytest.mark.parametrize(
    ("test_sh", "expected"),
    [
        ("cd /app && python3 -m pytest /tests/test_x.py\n", ["python3 -m pytest runs with /app"]),
        ("cd /app\npython -m unittest discover\n", ["python -m unittest runs with /app"]),
        ("pytest /tests/test_outputs.py\n", ["pytest runs in /app: the agent's conftest.py"]),
        ("cd /app/src; bash run_tests.sh\n", ["run_tests.sh is run from /app"]),
        ("./check.sh && echo ok\n", ["./check.sh is run from /app"]),
        ("export PATH=/app/bin:$PATH\n", ["PATH gets a folder the agent writes (/app/bin:$PATH)"]),
        ("cd /tests && python3 -m pytest test_x.py\n", []),
        ("cd /tmp\npytest /tests\n", []),
        ("python3 /tests/check.py\n", []),
        ("# pytest in a comment\n", []),
    ],
)
def test_what_the_agent_can_shadow_is_named_by_file_and_line(tmp_path, test_sh, expected):
    found = shadowing(Dataset(tmp_path)[task(tmp_path, "t", test_sh).name])
    assert len(found) == len(expected), found
    for item, start in zip(found, expected, strict=True):
        assert item["warning"].startswith(start), found
        assert item["file"] == "tests/test.sh"
        assert item["line"] == str(test_sh.count("\n") + 1)  # the last line, after #!/bin/bash


def test_the_workdir_comes_from_task_toml_before_the_dockerfile(tmp_path):
    folder = task(tmp_path, "t", "true\n", toml='[environment]\nworkdir = "/srv/code/"\n')
    assert workdir_of(Dataset(tmp_path)[folder.name]) == "/srv/code"


def test_the_bundled_examples_have_nothing_to_shadow():
    """Their verifiers run the tests by absolute path (python3 /tests/...): no false alarm."""
    dataset = Dataset(ROOT / "examples" / "dataset" / "tasks")
    assert {t.id: shadowing(t) for t in dataset if shadowing(t)} == {}


def test_validate_prints_each_finding_and_counts_the_tasks(tmp_path):
    task(tmp_path, "pytest-route", "cd /app && python3 -m pytest /tests\n")
    task(tmp_path, "clean", "python3 /tests/check.py\n")
    done = subprocess.run(
        [sys.executable, "-m", "harbor_openenv.cli", "validate", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "pytest-route/tests/test.sh:2: python3 -m pytest runs with /app first" in done.stdout
    assert "clean/tests/test.sh" not in done.stdout
    assert "1 run something the agent can shadow" in done.stdout


@pytest.mark.parametrize(
    ("test_sh", "expected"),
    [
        ("grep -q listen /etc/nginx/nginx.conf\n", "reads the system (/etc/nginx/nginx.conf)"),
        ("test -f /usr/lib/libfoo.so.1 && echo 1\n", "(/usr/lib/libfoo.so.1)"),
        ("[ $(nproc) -gt 0 ] && cat /proc/cpuinfo\n", "(/proc/cpuinfo)"),
        ("dpkg -l | grep -q nginx\n", "(dpkg -l)"),
        ("pip show requests >/dev/null\n", "(pip show)"),
        ("python3 -m pip freeze > /tmp/x\n", "(-m pip freeze)"),
        ("systemctl is-active redis\n", "(systemctl)"),
        ("python3 /tests/check.py /app/out.txt > /logs/verifier/reward.txt\n", None),
        ("/usr/bin/python3 /tests/check.py\n", None),
        ("cat /app/etc/config /tmp/x /dev/null\n", None),
        ("# cat /etc/passwd\n", None),
    ],
)
def test_validate_names_a_verifier_that_reads_the_system(tmp_path, test_sh, expected):
    found = system_state(Dataset(tmp_path)[task(tmp_path, "t", test_sh).name])
    if expected is None:
        assert found == []
    else:
        assert [f["line"] for f in found] == ["2"] and expected in found[0]["warning"], found


def test_validate_prints_the_system_state_lint(tmp_path):
    task(tmp_path, "t", "grep -q ok /var/lib/app/state\n")
    result = subprocess.run(
        [sys.executable, "-m", "harbor_openenv.cli", "validate", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "t/tests/test.sh:2: reads the system (/var/lib/app/state)" in result.stdout, result
    assert "1 read the system (not for a pristine verifier)" in result.stdout, result.stdout
