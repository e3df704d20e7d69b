"""The ``harbor-openenv`` command line without an engine: ``validate``, one-line usage errors,
``check``'s refusals, ``serve``'s health and its token refusals, ``images``' usage errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from _serve import _serve, _stop, assert_one_line_error, run_cli
from _server import FIXTURE_TASKS

# -- validate ------------------------------------------------------------------------------------


def _variant(root: Path, name: str, extra: str) -> None:
    """A copy of edit-file with ``extra`` appended to its task.toml."""
    shutil.copytree(FIXTURE_TASKS / "edit-file", root / name)
    toml = root / name / "task.toml"
    toml.write_text(toml.read_text() + extra)


# -- check (Docker) ------------------------------------------------------------------------------


def check(root: Path, *tasks: str, json_file: Path) -> subprocess.CompletedProcess:
    selection = [arg for task in tasks for arg in ("--task", task)]
    return run_cli("check", root, *selection, "--jobs", "4", "--json", json_file)


# -- serve ---------------------------------------------------------------------------------------


# -- images (Docker) -----------------------------------------------------------------------------


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
        "HARBOR",
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
        "harbor_warnings": [],
        "shadowing": [],
        "system_state": [],
        "needs": {},
    }
    assert "[environment].cpus" in tasks["broken/nested-invalid"]["problems"][0]
    assert tasks["text-only"]["image"] is None


def test_validate_reports_what_harbor_would_refuse(tmp_path):
    _variant(tmp_path, "bare-name", '\n[task]\nname = "bare-name"\n')
    _variant(tmp_path, "org-name", '\n[task]\nname = "fixtures/org-name"\n')
    _variant(tmp_path, "tpu-shape", "\n[environment.tpu]\ntype = 'v6e'\ntopology = '2'\n")
    result = run_cli("validate", tmp_path)
    assert result.returncode == 0, result  # warnings, not refusals: this runtime serves them
    lines = result.stdout.splitlines()
    assert lines[0].split()[6:] == ["HARBOR", "PROBLEMS"]
    rows = {line.split()[0]: line.split() for line in lines[1:4]}
    assert rows["bare-name"][1] == "runnable" and rows["bare-name"][6] == "refuses:[task].name"
    assert rows["org-name"][6] == "ok"
    assert rows["tpu-shape"][6] == "refuses:[environment].tpu.topology"
    assert any(
        line.startswith("Harbor 0.25 would refuse bare-name/task.toml: [task].name: must be")
        for line in lines
    ), lines
    assert "Harbor 0.25 would refuse 2" in lines[-1]
    report = json.loads(run_cli("validate", tmp_path, "--json").stdout)
    tasks = {row["task"]: row for row in report["tasks"]}
    assert [w["field"] for w in tasks["bare-name"]["harbor_warnings"]] == ["[task].name"]
    assert "'bare-name'" in tasks["bare-name"]["harbor_warnings"][0]["warning"]
    assert tasks["org-name"]["harbor_warnings"] == []
    assert report["ok"] is True


def test_validate_warns_of_harbors_legacy_log_mounts(tmp_path):
    """A public task's compose file mounting ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}
    (variables Harbor 0.25 sets only with auto_mounting) is named, with the file."""
    for name, volumes in (
        ("legacy", "${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}"),
        ("named", "data:/data"),
    ):
        _variant(tmp_path, name, "")
        (tmp_path / name / "environment" / "docker-compose.yaml").write_text(
            f"services:\n  main:\n    build:\n      context: ${{CONTEXT_DIR}}\n"
            f"    volumes:\n      - {volumes}\n"
        )
    report = json.loads(run_cli("validate", tmp_path, "--json").stdout)
    warnings = {row["task"]: row["harbor_warnings"] for row in report["tasks"]}
    assert warnings["named"] == []
    [found] = warnings["legacy"]
    assert found["field"] == "environment/docker-compose.yaml"
    assert found["warning"].startswith(
        "legacy/environment/docker-compose.yaml: uses ENV_VERIFIER_LOGS_PATH,"
        " HOST_VERIFIER_LOGS_PATH, which Harbor 0.25 sets only with `--ek auto_mounting=true`"
    )


def test_validate_names_variables_needed_at_serve_time(tmp_path):
    _variant(tmp_path, "cloud", '\n[verifier.env]\nKEY = "${HOE_CLOUD_KEY}"\nMODE = "${M:-fast}"\n')
    _variant(tmp_path, "plain", "")
    result = run_cli("validate", tmp_path)
    assert result.returncode == 0, result
    assert "cloud: needs HOE_CLOUD_KEY at serve time ([verifier].env.KEY)" in result.stdout
    assert "plain: needs" not in result.stdout and "needs M " not in result.stdout
    report = json.loads(run_cli("validate", tmp_path, "--json").stdout)
    needs = {row["task"]: row["needs"] for row in report["tasks"]}
    assert needs == {"cloud": {"HOE_CLOUD_KEY": ["[verifier].env.KEY"]}, "plain": {}}


def test_validate_needs_only_the_core_package():
    code = (
        "import sys, contextlib, io\n"
        "from harbor_openenv.cli.main import main\n"
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


def test_serve_names_an_unreadable_or_empty_token_file(tmp_path):
    (tmp_path / "empty").write_text("\n")
    assert_one_line_error(
        run_cli("serve", FIXTURE_TASKS, "--token-file", tmp_path / "empty"), "empty"
    )
    assert_one_line_error(
        run_cli("serve", FIXTURE_TASKS, "--token-file", tmp_path / "missing"), "cannot read"
    )


def test_images_usage_errors(tmp_path):
    assert_one_line_error(run_cli("images", FIXTURE_TASKS, "-j", "0"), "--jobs must be at least 1")
    assert_one_line_error(run_cli("images", tmp_path / "nope"), "no such folder")
