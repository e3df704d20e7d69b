"""The ``harbor-openenv`` command line on the real engine: ``check`` (oracle, verifier, multi-step,
Ctrl-C), ``serve`` with a token file, ``images`` building and pulling. The engine-free commands
(validate, usage errors, serve's refusals) are tests/unit/test_cli.py."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import docker.errors
import pytest
from _serve import CLI, _serve, _stop, assert_one_line_error, run_cli
from _server import FIXTURE_TASKS, ROOT, runtime_containers, wait_until

from harbor_openenv.sandbox import server_scope

FORMAT_TASKS = ROOT / "tests" / "fixtures" / "format"


# -- validate ------------------------------------------------------------------------------------


# -- check (Docker) ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def check_dataset(tmp_path_factory) -> Path:
    """edit-file, a copy whose oracle does nothing, one whose verifier hangs, one whose oracle
    also puts a program on PATH, and no-reward."""
    root = tmp_path_factory.mktemp("check") / "tasks"
    for name in ("edit-file", "no-reward"):
        shutil.copytree(FIXTURE_TASKS / name, root / name)
    for name, script, command in (
        ("bad-oracle", "solution/solve.sh", "true"),
        ("hanging", "tests/test.sh", "sleep 50"),
        (
            "oracle-on-path",
            "solution/solve.sh",
            "echo 42 > /work/answer.txt; mkdir -p /opt/tool; echo x > /opt/tool/data;"
            " printf '#!/bin/sh\\n' > /usr/local/bin/tool",
        ),
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
    assert table[0].split() == ["TASK", "NOP", "ORACLE", "SECONDS", "STATUS", "CHANGES"]
    assert table[1].split() == ["edit-file", "0", "1", table[1].split()[3], "ok", "-"]
    assert row["oracle_changes"] == {} and row["oracle_suspect"] == [] and row["warnings"] == []
    assert "1 tasks checked" in table[-1] and "flagged 0 oracle runs" in table[-1]
    assert "checked 1/1" in result.stderr


@pytest.mark.docker
def test_check_warns_of_an_oracle_the_tamper_report_flags(docker_client, check_dataset, tmp_path):
    """A solve.sh that also writes a program on PATH still passes, with a warning that the
    tamper report would flag its honest rollouts (a trainer dropping them drops the task)."""
    result = check(check_dataset, "oracle-on-path", json_file=tmp_path / "out.json")
    assert result.returncode == 0, result
    [row] = json.loads((tmp_path / "out.json").read_text())
    assert (row["oracle"], row["ok"]) == (1.0, True)
    assert row["oracle_changes"] == {"other": 1, "executables": 1}  # /opt/tool: not reached
    assert row["oracle_suspect"] == ["/usr/local/bin/tool"]
    [warning] = row["warnings"]
    assert f"warning: {warning}" in result.stdout.splitlines()
    assert "SUSPECT other 1, executables 1" in result.stdout
    assert "flagged 1 oracle runs" in result.stdout.splitlines()[-1]


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


def _three_step_task(task: Path) -> None:
    """Steps a, b, c: each solution writes its file; each step's test wants every file so far.
    ``final``: only the last step's reward counts, so only an episode reaching c can score."""
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "task.toml").write_text(
        'multi_step_reward_strategy = "final"\n'
        + "".join(f'[[steps]]\nname = "{name}"\n' for name in "abc")
    )
    for index, name in enumerate("abc"):
        step = task / "steps" / name
        (step / "tests").mkdir(parents=True)
        (step / "solution").mkdir()
        (step / "instruction.md").write_text(f"Write /app/{name}.txt.\n")
        (step / "solution" / "solve.sh").write_text(f"#!/bin/bash\necho {name} > /app/{name}.txt\n")
        wanted = " ".join(f"/app/{done}.txt" for done in "abc"[: index + 1])
        (step / "tests" / "test.sh").write_text(
            f"#!/bin/bash\nif cat {wanted} >/dev/null 2>&1; then r=1; else r=0; fi\n"
            "echo $r > /logs/verifier/reward.txt\n"
        )


@pytest.mark.docker
def test_check_walks_every_step_of_multi_step_tasks(docker_client, tmp_path):
    root = tmp_path / "tasks"
    for name in ("multi-step", "multi-step-final"):
        shutil.copytree(FORMAT_TASKS / name, root / name)
    _three_step_task(root / "three-steps")
    result = run_cli("check", root, "--jobs", "3", "--json", tmp_path / "out.json")
    assert result.returncode == 0, result
    rows = {row["task"]: row for row in json.loads((tmp_path / "out.json").read_text())}
    assert sorted(rows) == ["multi-step", "multi-step-final", "three-steps"]
    for row in rows.values():
        assert (row["nop"], row["oracle"], row["ok"]) == (0.0, 1.0, True), row
        assert row["oracle_error"] is None, row
    # the multi-step no-op ends at step one's min_reward, and says so
    assert "below min_reward" in rows["multi-step"]["nop_error"]


@pytest.mark.docker
@pytest.mark.parametrize("sigint", ["inherited", "ignored"])
def test_check_removes_its_containers_on_ctrl_c(docker_client, check_dataset, sigint):
    """``ignored``: started as a non-interactive shell starts a background command (SIGINT
    ignored, which Python keeps); the check must still stop on SIGINT."""
    command = [*CLI, "check", str(check_dataset), "--task", "hanging"]
    if sigint == "ignored":  # exec keeps the process id and the ignored signal
        command = ["bash", "-c", 'trap "" INT; exec "$@"', "bash", *command]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    owner = f"{server_scope()}:{process.pid}:"

    def both_hang() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the check ended before its episodes hung: {process.communicate()}")
        return len(runtime_containers(docker_client, owner)) == 2

    try:
        # Both episodes hang in their verifier (timeout 60 s).
        assert wait_until(both_hang, 120), runtime_containers(docker_client, owner)
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


# -- images (Docker) -----------------------------------------------------------------------------


NONCE = f"harbor-openenv.test-nonce={uuid.uuid4().hex}"


def fresh_build(root: Path, name: str, extra: str = "") -> None:
    """edit-file as ``name``, with a Dockerfile no engine has built before."""
    shutil.copytree(FIXTURE_TASKS / "edit-file", root / name)
    with (root / name / "environment" / "Dockerfile").open("a") as handle:
        handle.write(f"LABEL {NONCE}-{name}\n{extra}")


def remove_built(docker_client) -> None:
    """The images these tests built (their Dockerfiles' LABEL), and what a failed build left."""
    label, value = NONCE.split("=")
    for _ in range(3):  # children first: removing one prunes its untagged parents
        images = docker_client.images.list(all=True, filters={"label": label})
        ours = [i for i in images if (i.labels or {}).get(label, "").startswith(value)]
        for image in sorted(ours, key=lambda i: not i.tags):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                docker_client.images.remove(image.id, force=True)


@pytest.mark.docker
def test_images_builds_and_pulls_every_task_image_in_parallel(docker_client, tmp_path):
    root = tmp_path / "tasks"
    fresh_build(root, "one")
    fresh_build(root, "two")
    fresh_build(root, "broken-build", "RUN exit 3\n")
    shutil.copytree(FIXTURE_TASKS / "text-only", root / "text-only")
    given = root / "given"
    shutil.copytree(FIXTURE_TASKS / "edit-file", given)
    shutil.rmtree(given / "environment")
    (given / "task.toml").write_text(
        (given / "task.toml").read_text() + 'docker_image = "debian:bookworm-slim"\n'
    )
    result = run_cli("images", root, "-j", "3")
    try:
        assert result.returncode == 1, result  # broken-build fails
        err = result.stderr
        assert "skipped text-only (text-only" in err
        assert "4 image(s) for 5 task(s), 3 at once" in err
        progress = [line for line in err.splitlines() if line.startswith("[")]
        assert sorted(line[:5] for line in progress) == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
        assert any("(given): present in" in line for line in progress)
        assert sum(": built in" in line for line in progress) == 2
        failed = next(line for line in progress if "(broken-build): FAILED: " in line)
        assert "returned a non-zero code: 3" in failed
        assert "image build task=one image=harbor-openenv/task:" in err
        assert "image build step task=one step=1/" in err
        rows = result.stdout.splitlines()
        assert rows[0].split() == ["IMAGE", "TASKS", "STATUS", "SECONDS"]
        statuses = {row.split()[0]: row.split()[2] for row in rows[1:5]}
        assert statuses["debian:bookworm-slim"] == "present"
        assert sorted(statuses.values()) == ["built", "built", "failed", "present"]
        assert rows[-1].startswith("4 image(s) in ") and "3 ready, 1 failed" in rows[-1]

        again = run_cli("images", root / "one")  # a single task folder is refused
        assert_one_line_error(again, "is a single task")
        rerun = run_cli("images", root, "-j", "2")
        assert sum(" present " in row for row in rerun.stdout.splitlines()) == 3
    finally:
        remove_built(docker_client)


@pytest.mark.docker
def test_check_logs_the_build_it_waits_for(docker_client, tmp_path):
    root = tmp_path / "tasks"
    fresh_build(root, "fresh")
    result = run_cli("check", root)
    try:
        assert result.returncode == 0, result
        lines = result.stderr.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("image build task=fresh"))
        assert lines[start + 1].startswith("image build step task=fresh step=1/")
        assert any(line.startswith("image built task=fresh ") for line in lines[start:])
        assert not any(line.startswith(("reset ", "evaluate ")) for line in lines)  # check's own
    finally:
        remove_built(docker_client)
