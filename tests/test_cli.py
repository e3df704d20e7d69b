"""The ``harbor-openenv`` command line: validate, check (real Docker) and serve."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import FIXTURE_TASKS, free_port, runtime_containers, wait_until

from harbor_openenv.sandbox import server_scope

CLI = [sys.executable, "-m", "harbor_openenv.cli"]


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert "Traceback" not in result.stderr, result.stderr  # a crash is never a verdict
    return result


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr


# -- validate ------------------------------------------------------------------------------------


def test_validate_reports_the_invalid_field_and_fails():
    result = run_cli("validate", FIXTURE_TASKS)
    assert result.returncode == 1, result
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "TASK",
        "KIND",
        "IMAGE",
        "AGENT_S",
        "VERIFIER_S",
        "BUILD_S",
        "PROBLEMS",
    ]
    broken = next(line for line in lines if line.startswith("broken/nested-invalid "))
    assert "invalid" in broken and "[environment].cpus" in broken
    edit = next(line for line in lines if line.startswith("edit-file ")).split()
    assert edit[1:6] == ["runnable", "dockerfile", "120", "60", "120"]
    assert "text-only" in next(line for line in lines if line.startswith("text-only "))
    assert lines[-1].startswith("7 tasks in ") and "1 invalid" in lines[-1]


def test_validate_passes_without_the_invalid_task(tmp_path):
    shutil.copytree(FIXTURE_TASKS, tmp_path / "tasks", ignore=shutil.ignore_patterns("broken"))
    result = run_cli("validate", tmp_path)  # a dataset folder: tasks/ is found under it
    assert result.returncode == 0, result
    assert "6 tasks in" in result.stdout and "0 invalid" in result.stdout


def test_validate_json():
    result = run_cli("validate", FIXTURE_TASKS, "--json")
    assert result.returncode == 1, result
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["counts"] == {"runnable": 5, "text-only": 1, "invalid": 1, "unsupported": 0}
    tasks = {row["task"]: row for row in report["tasks"]}
    assert tasks["edit-file"] == {
        "task": "edit-file",
        "kind": "runnable",
        "image": {"kind": "dockerfile", "ref": None, "pullable": True},
        "agent_timeout_sec": 120.0,
        "verifier_timeout_sec": 60.0,
        "build_timeout_sec": 120.0,
        "problems": [],
    }
    assert "[environment].cpus" in tasks["broken/nested-invalid"]["problems"][0]
    assert tasks["text-only"]["image"] is None


def test_validate_needs_only_the_core_package():
    code = (
        "import sys, contextlib, io\n"
        "from harbor_openenv.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    status = main(['validate', {str(FIXTURE_TASKS)!r}])\n"
        "heavy = sorted({'openenv', 'docker', 'fastapi', 'uvicorn'} & set(sys.modules))\n"
        "assert status == 1 and not heavy, (status, heavy)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_missing_dataset_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "nowhere"
    for command in ("validate", "check", "serve"):
        assert_one_line_error(run_cli(command, missing), str(missing), "no such folder")


def test_folder_without_tasks_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    assert_one_line_error(run_cli("validate", tmp_path / "empty"), "no task directory")


def test_unknown_task_id_is_one_line_and_exit_2():
    result = run_cli("check", FIXTURE_TASKS, "--task", "edit-file", "--task", "no-such-task")
    assert_one_line_error(result, "no-such-task")


def test_version():
    from harbor_openenv import __version__

    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"harbor-openenv {__version__}"


def test_check_fails_invalid_tasks_and_skips_text_only_ones(tmp_path):
    for name in ("broken", "text-only"):
        shutil.copytree(FIXTURE_TASKS / name, tmp_path / name)
    result = run_cli("check", tmp_path, "--json", "-")
    assert result.returncode == 1, result
    [row] = json.loads(result.stdout)
    assert (row["task"], row["ok"], row["nop"], row["oracle"]) == (
        "broken/nested-invalid",
        False,
        None,
        None,
    )
    assert row["problems"][0].startswith("broken/nested-invalid: is invalid: ")
    assert "[environment].cpus" in row["problems"][0]
    assert "skipped text-only (text-only)" in result.stderr
    assert row["problems"][0] in result.stderr  # the report goes to stderr with --json -


def test_check_refuses_a_named_task_that_cannot_run():
    result = run_cli("check", FIXTURE_TASKS, "--task", "text-only", "--json", "-")
    assert result.returncode == 1, result
    [row] = json.loads(result.stdout)
    assert row["task"] == "text-only" and row["ok"] is False
    assert row["problems"][0].startswith("text-only: is text-only")


# -- check (Docker) ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def check_dataset(tmp_path_factory) -> Path:
    """edit-file, a copy whose oracle does nothing, one whose verifier hangs, and no-reward."""
    root = tmp_path_factory.mktemp("check") / "tasks"
    for name in ("edit-file", "no-reward"):
        shutil.copytree(FIXTURE_TASKS / name, root / name)
    for name, script, command in (
        ("bad-oracle", "solution/solve.sh", "true"),
        ("hanging", "tests/test.sh", "sleep 50"),
    ):
        shutil.copytree(FIXTURE_TASKS / "edit-file", root / name)
        (root / name / script).write_text(f"#!/bin/bash\n{command}\n")
    return root


def check(root: Path, *tasks: str, json_file: Path) -> subprocess.CompletedProcess:
    selection = [arg for task in tasks for arg in ("--task", task)]
    return run_cli("check", root, *selection, "--jobs", "4", "--json", json_file)


@pytest.mark.docker
def test_check_passes_a_good_task(docker_client, check_dataset, tmp_path):
    result = check(check_dataset, "edit-file", json_file=tmp_path / "out.json")
    assert result.returncode == 0, result
    [row] = json.loads((tmp_path / "out.json").read_text())
    assert (row["task"], row["nop"], row["oracle"], row["ok"]) == ("edit-file", 0.0, 1.0, True)
    assert row["problems"] == [] and row["nop_error"] is None and row["oracle_error"] is None
    assert row["seconds"] > 0
    table = result.stdout.splitlines()
    assert table[0].split() == ["TASK", "NOP", "ORACLE", "SECONDS", "STATUS"]
    assert table[1].split()[:3] == ["edit-file", "0", "1"]
    assert "1 tasks checked" in table[-1]
    assert "checked 1/1" in result.stderr


@pytest.mark.docker
def test_check_fails_an_oracle_that_does_not_solve(docker_client, check_dataset, tmp_path):
    result = check(check_dataset, "bad-oracle", json_file=tmp_path / "out.json")
    assert result.returncode == 1, result
    [row] = json.loads((tmp_path / "out.json").read_text())
    assert (row["nop"], row["oracle"], row["ok"]) == (0.0, 0.0, False)
    [problem] = row["problems"]
    assert problem.startswith("bad-oracle: the oracle scored 0")
    assert problem in result.stdout.splitlines()


@pytest.mark.docker
def test_check_fails_a_verifier_without_reward(docker_client, check_dataset, tmp_path):
    result = check(check_dataset, "no-reward", json_file=tmp_path / "out.json")
    assert result.returncode == 1, result
    [row] = json.loads((tmp_path / "out.json").read_text())
    assert (row["nop"], row["oracle"], row["ok"]) == (None, None, False)
    assert "wrote no reward" in row["oracle_error"] and "wrote no reward" in row["nop_error"]
    assert len(row["problems"]) == 2
    assert all(line.startswith("no-reward: ") for line in row["problems"])


@pytest.mark.docker
def test_check_removes_its_containers_on_ctrl_c(docker_client, check_dataset):
    process = subprocess.Popen(
        [*CLI, "check", str(check_dataset), "--task", "hanging"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    owner = f"{server_scope()}:{process.pid}:"
    try:
        # Both episodes hang in their verifier (timeout 60 s).
        assert wait_until(lambda: len(runtime_containers(docker_client, owner)) == 2, 120)
        time.sleep(2)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert runtime_containers(docker_client, owner) == []


# -- serve ---------------------------------------------------------------------------------------


def _serve(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, int]:
    """``harbor-openenv serve`` on the fixture tasks, healthy; returns the process and port."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if k != "HARBOR_OPENENV_ORCHESTRATION_TOKEN"}
    process = subprocess.Popen(
        [*CLI, "serve", str(FIXTURE_TASKS), "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**environ, **(env or {})},
    )

    def healthy() -> bool:
        assert process.poll() is None, process.stdout.read()
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        assert wait_until(healthy, 60)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return process, port


def _stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    # uvicorn shuts down gracefully, then re-raises the signal it caught.
    assert process.returncode in (0, -signal.SIGTERM), output
    return output


def test_serve_answers_health_and_stops():
    process, port = _serve(env={"HARBOR_OPENENV_ORCHESTRATION_TOKEN": "t"})
    output = _stop(process)
    assert "Application shutdown complete" in output
    assert f"serving {FIXTURE_TASKS} on http://127.0.0.1:{port}" in output


def test_serve_refuses_a_token_on_the_command_line_and_says_why():
    for args in (["--token", "s3cret"], ["--token=s3cret"]):
        result = run_cli("serve", FIXTURE_TASKS, *args)
        assert_one_line_error(result, "refuses --token", "ps", "--token-file")
    shown = run_cli("serve", "--help").stdout
    assert "--token-file" in shown and "refused" in shown
    assert "HARBOR_OPENENV_ORCHESTRATION_TOKEN" in shown


def test_serve_reads_the_token_from_a_file_and_keeps_it_out_of_ps(docker_client, tmp_path):
    from harbor_openenv.client import HarborEnvClient

    token = "file-token-" + os.urandom(8).hex()
    (tmp_path / "token").write_text(f"{token}\n")
    (tmp_path / "token").chmod(0o600)
    process, port = _serve("--token-file", str(tmp_path / "token"))
    try:
        listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert token not in listing
        assert token not in Path(f"/proc/{process.pid}/cmdline").read_text()
        url = f"http://127.0.0.1:{port}"
        with HarborEnvClient(url, orchestration_token=token) as env:
            env.reset(task_id="edit-file")
            env.write("answer.txt", "42")
            assert env.evaluate().reward == 1.0  # the file's token is the server's
        with HarborEnvClient(url, orchestration_token="wrong") as env:
            env.reset(task_id="edit-file")
            assert "orchestration token" in env.evaluate().observation.error
    finally:
        output = _stop(process)
    assert token not in output


def test_serve_names_an_unreadable_or_empty_token_file(tmp_path):
    (tmp_path / "empty").write_text("\n")
    assert_one_line_error(
        run_cli("serve", FIXTURE_TASKS, "--token-file", tmp_path / "empty"), "empty"
    )
    assert_one_line_error(
        run_cli("serve", FIXTURE_TASKS, "--token-file", tmp_path / "missing"), "cannot read"
    )
