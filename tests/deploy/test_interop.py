"""Interoperability: the same rewards as `harbor run`, and OpenEnv's own tools on our environments.

Needs what .ci/interop-tools.sh installs: Harbor in its own Python 3.12 venv, the `docker compose`
plugin and Debian's chromium. Missing tools fail these tests; nothing here skips.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _interop import CHROMIUM_ARGS, HARBOR_VENV
from _server import ROOT, TOKEN, Server, runtime_containers, wait_until
from _template_helpers import readme_block, shell

from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.task import TaskKind

pytestmark = pytest.mark.docker

EXAMPLE = ROOT / "examples" / "dataset"
PARITY = ROOT / "scripts" / "parity.py"
OPENENV = Path(sys.executable).with_name("openenv")


def load_parity():
    spec = importlib.util.spec_from_file_location("parity", PARITY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- parity with Harbor ------------------------------------------------------------------------


@pytest.mark.timeout(900)
def test_parity_with_harbor_run(docker_client, tmp_path) -> None:
    """The example dataset: per task, `harbor run` and this runtime give the same rewards."""
    out = tmp_path / "parity.json"
    run = subprocess.run(
        [sys.executable, str(PARITY), str(EXAMPLE), "--build-network", "none", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=850,
    )
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
    header = run.stdout.splitlines()[0]
    assert header.split(" | ")[0].strip() == "task" and header.rstrip().endswith("same?")

    rows = json.loads(out.read_text())
    dataset = Dataset(EXAMPLE / "tasks")
    assert sorted(rows) == dataset.ids
    for task_id, row in rows.items():
        if dataset[task_id].kind is TaskKind.TEXT_ONLY:
            # Harbor silently skips it (Task.is_valid_dir is False); we refuse it at reset.
            assert row["harbor"] == {} and row["same"] is None, row
            assert all("text-only" in row["runtime"][p]["error"] for p in ("nop", "oracle"))
            continue
        assert row["same"] is True, (task_id, row["verdict"])
        for policy in ("nop", "oracle"):
            theirs, ours = row["harbor"][policy], row["runtime"][policy]
            assert theirs["reward"] == ours["reward"], (task_id, policy)
            assert theirs["metrics"] == ours["metrics"], (task_id, policy)
        # The dataset's oracles solve their tasks and doing nothing does not: equal rewards
        # are not two missing ones.
        assert row["runtime"]["oracle"]["reward"] == 1.0, task_id
        assert row["runtime"]["nop"]["reward"] == 0.0, task_id


def test_parity_verdicts() -> None:
    """The comparison behind the `same?` column flags any difference in reward or metrics."""
    parity = load_parity()

    def outcome(reward, **metrics):
        return {"reward": reward, "metrics": {"reward": reward, **metrics}, "error": None}

    same = {"nop": outcome(0.0), "oracle": outcome(1.0, passed=3)}
    assert parity.compare(same, same) == (True, "yes")
    assert parity.compare(same, {**same, "nop": outcome(None)})[0] is False
    assert parity.compare(same, {**same, "oracle": outcome(1.0, passed=2)})[0] is False
    assert parity.compare({"nop": same["nop"]}, same) == (False, "oracle: Harbor ran no trial")
    refused = {"reward": None, "metrics": {}, "error": "x is a text-only task", "refused": True}
    assert parity.compare({}, {"nop": refused, "oracle": refused}) == (None, "n/a (text-only)")
    assert parity.scalar({"reward": 0.5, "f2p": 1}) == 0.5 and parity.scalar({"only": 2}) == 2
    assert parity.scalar({"a": 1, "b": 2}) is None


# -- OpenEnv's own tools on a freshly rendered environment repo --------------------------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """The example dataset rendered into a new environment repo, as README.md shows."""
    dest = tmp_path_factory.mktemp("rendered") / "example-env"
    command = [sys.executable, "-m", "copier", "copy", "--trust", "--defaults"]
    command += ["--vcs-ref", "HEAD", str(ROOT), str(dest)]
    # (the copy builds the runtime's wheel, its helper compiled for two architectures: minutes on a
    # loaded 2-core machine)
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    return dest


@pytest.fixture(scope="module")
def rendered_server(docker_client, rendered) -> Iterator[Server]:
    srv = Server(rendered / "tasks")
    yield srv
    srv.stop()


def openenv(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(OPENENV), *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_openenv_validate_static(rendered) -> None:
    run = openenv("validate", str(rendered), "--level", "static", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["verdict"] == "pass", report
    checks = {check["check_id"]: check["status"] for check in report["results"]}
    assert checks == {"static.manifest": "pass"}, checks


# A check in `openenv validate`'s report: "  SKIP  runtime.startup (0.00s)", and its reason
# indented on the next line (a PASS has none).
REPORT_LINE = re.compile(r"^  (PASS|FAIL|SKIP|ERROR)  (\S+) \([0-9.]+s\)(?:\n {10}(.+))?$", re.M)
CREDENTIALS = "credential_delivery is deferred for this release"
UNMET = "unmet dependency: runtime.startup"
NOT_IMPLEMENTED = "grader not implemented in this build"


def unimplemented_checks() -> set[str]:
    """The checks OpenEnv's own build has no grader for, from its policy v2 and grader registry:
    every package's report at the default level has them as SKIP, so no package gets a PASS."""
    from openenv.validation.policy import load_policy
    from openenv.validation.runner import default_grader_registry
    from openenv.validation.types import Lane, Level

    policy = load_policy("v2")
    registry = default_grader_registry(policy)
    graded = {check for check in policy.entries_for_lane(Lane.LOCAL) if registry.get(check)}
    return {
        entry.check_id
        for entry in policy.entries_for_lane(Lane.LOCAL).values()
        if entry.level >= Level.RUNTIME
        and entry.check_id not in graded | {"runtime.startup"}
        # what OpenEnv leaves out for a package with no rubric and no task API
        and entry.check_id
        not in {
            "runtime.rubric_introspectable",
            "runtime.reward_attribution",
            "runtime.task_declaration_accuracy",
        }
    }


def test_openenv_validate_as_the_rendered_readme_runs_it(rendered) -> None:
    """The rendered README's `uv run openenv validate .`, as written: WARN, for exactly the
    reasons that README gives."""
    readme = (rendered / "README.md").read_text()
    block = readme_block(readme, "validate")
    assert block == "uv run openenv validate ."
    out = shell(block, cwd=rendered, timeout=600)
    assert re.search(r"^Verdict: WARN$", out, re.MULTILINE), out  # (uv's own lines beside it)
    checks = {check: (status, reason) for status, check, reason in REPORT_LINE.findall(out)}
    unimplemented = unimplemented_checks()
    assert len(checks) == 22 and len(unimplemented) == 16, (checks, unimplemented)
    dependents = {
        "runtime.reward_well_formed",
        "runtime.observation_schema",
        "runtime.state_contract",
        "runtime.network_policy",
    }
    assert checks == {
        "static.manifest": ("PASS", ""),
        "runtime.startup": ("SKIP", CREDENTIALS),
        **{check: ("SKIP", UNMET) for check in dependents},
        **{check: ("SKIP", NOT_IMPLEMENTED) for check in unimplemented},
    }, out
    assert "implements 6 of them; the other 16" in readme


def test_openenv_validate_reads_the_runtime_plan(rendered, tmp_path) -> None:
    """The declared plan is really read: a malformed one fails runtime.startup (a FAIL verdict)."""
    copy = tmp_path / "env"
    shutil.copytree(rendered, copy, ignore=shutil.ignore_patterns(".venv", ".git"))
    (copy / "validation" / "runtime.json").write_text('{"plan_schema_version": "1"}')
    run = openenv("validate", str(copy), "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads(run.stdout)
    startup = next(c for c in report["results"] if c["check_id"] == "runtime.startup")
    assert startup["status"] == "fail", startup
    assert "runtime plan schema validation failed" in startup["evidence"][0], startup


def test_openenv_validate_url(rendered_server) -> None:
    run = openenv("validate", "--url", rendered_server.url, "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["passed"] is True, report["summary"]
    assert {c["id"] for c in report["criteria"] if c["passed"]} >= {
        "health_endpoint",
        "schema_endpoint",
        "mode_endpoint_consistency",
    }


def test_generic_client_whole_episode(rendered_server, docker_client) -> None:
    """OpenEnv's dict-based client, knowing nothing of our models, runs a task to its reward."""
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=rendered_server.url, message_timeout_s=600) as env:
        first = env.reset(task_id="hello-world")
        assert isinstance(first.observation, dict) and not first.done
        assert "Hello, world!" in first.observation["instruction"]
        assert runtime_containers(docker_client, rendered_server.owner_prefix)

        write = {"action_type": "write", "path": "hello.txt", "content": "Hello, world!\n"}
        wrote = env.step(write)
        assert wrote.observation["error"] is None, wrote.observation
        shown = env.step({"action_type": "exec", "command": "cat /app/hello.txt"})
        assert shown.observation["output"] == "Hello, world!\n"
        assert shown.observation["exit_code"] == 0
        state = env.state()
        assert state["task_id"] == "hello-world" and state["step_count"] == 2

        refused = env.step({"action_type": "evaluate"})  # no token: the agent cannot grade
        assert refused.reward is None and "orchestration token" in refused.observation["error"]
        graded = env.step({"action_type": "evaluate", "token": TOKEN})
        assert graded.done and graded.reward == 1.0
        assert graded.observation["info"]["metrics"] == {"reward": 1.0}
        assert env.state()["evaluated"] is True
    assert wait_until(lambda: not runtime_containers(docker_client, rendered_server.owner_prefix))


# -- OpenEnv's web interface in a real browser -------------------------------------------------


def test_web_interface_reset_and_run_a_command(docker_client, tmp_path) -> None:
    """A person on OpenEnv's page (ENABLE_WEB_INTERFACE) resets a task and runs a command."""
    from playwright.sync_api import expect, sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: run .ci/interop-tools.sh"
    instruction = Dataset(EXAMPLE / "tasks")["hello-world"].instruction
    server = Server(
        EXAMPLE / "tasks",
        ENABLE_WEB_INTERFACE="true",
        HARBOR_OPENENV_DEFAULT_TASK="hello-world",
    )
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch_persistent_context(
                tmp_path / "profile",
                executable_path=chromium,
                args=CHROMIUM_ARGS,
                viewport={"width": 1400, "height": 1000},
            )
            page = browser.new_page()
            # Gradio builds the page in the browser; on a loaded machine that takes a while.
            page.set_default_timeout(120_000)
            page.goto(f"{server.url}/web/")
            page.get_by_role("button", name="Reset").click()
            expect(page.get_by_text("hello-world", exact=True).first).to_be_visible(timeout=180_000)
            assert runtime_containers(docker_client, server.owner_prefix)

            page.get_by_label("command").fill("echo $((6*7))-from-the-page; pwd")
            page.get_by_role("button", name="Run step").click()
            expect(page.get_by_text("42-from-the-page").first).to_be_visible(timeout=180_000)
            screenshot = tmp_path / "web-interface.png"
            page.screenshot(path=screenshot, full_page=True)
            text = page.inner_text("body")
            browser.close()
    finally:
        server.stop()
    print(f"screenshot: {screenshot}")
    assert screenshot.stat().st_size > 10_000
    for line in instruction.strip().splitlines():
        assert line.strip() in text, f"the page does not show the instruction line {line!r}"
    assert "42-from-the-page\n/app" in text  # the command ran in the task's workdir
    assert not runtime_containers(docker_client, server.owner_prefix)


# -- what Harbor's task model refuses ------------------------------------------------------------

HARBOR_CASES = [
    "",  # everything defaults
    'schema_version = "1.4"\n[task]\nname = "org/hello"\nversion = "1"',
    '[task]\nname = "hello"',  # not org/name
    '[task]\nname = "org/../x"',
    '[task]\nname = "org/x"\nversion = ""',
    '[task]\nname = "org/x"\nauthors = [{ email = "a@b" }]',
    "[task]\ndescription = 'no name'",
    "version = 1.0",  # schema_version must be a string
    "schema_version = 2",
    'version = "1.0"',
    "source = 3",
    '[environment]\nos = "Windows"',
    '[environment]\nos = "macos"',
    '[environment]\ncpus = "many"',
    '[environment]\nmemory = "4GB"',
    '[environment]\nmemory = "4G"\nmemory_mb = 10',
    "[environment]\nmemory = 4096",  # dropped, as Harbor does
    '[environment]\nallowed_hosts = ["example.com"]',
    '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["http://example.com"]',
    '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["*.example.com", "10.0.0.0/8"]',
    '[agent]\nallowed_hosts = ["example.com"]',
    '[environment]\ngpu_types = "H100"',
    '[environment.tpu]\ntype = "v6e"\ntopology = "2"',
    '[environment.tpu]\ntype = ""\ntopology = "2x2"',
    '[[environment.mcp_servers]]\nname = "m"\ntransport = "sse"',
    '[[environment.mcp_servers]]\nname = "m"\ntransport = "stdio"\ncommand = "x"',
    "[environment]\nenv = { A = 1 }",
    '[environment]\nskills_dir = 3\nworkdir = "/w"',
    "[environment.healthcheck]\ninterval_sec = 1",  # command missing
    '[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\ncpus = 1',
    '[verifier]\nenvironment_mode = "elsewhere"',
    "[[verifier.collect]]\ncommand = 'true'\nservice = '-bad'",
    'multi_step_reward_strategy = "max"',
    '[[steps]]\nname = "CON"',
    '[[steps]]\nname = "a"\n[[steps]]\nname = "A"',
    '[[steps]]\nname = "a"\nmin_reward = "high"',
    '[[steps]]\nname = "ok"\nmin_reward = { reward = 0.5 }',
    'artifacts = [{ source = "x", service = "db" }]',
    'artifacts = [{ source = "/x", destination = "/abs" }]',
    'artifacts = [{ source = "/x", destination = "manifest.json" }]',
    'artifacts = ["/logs/a", { source = "/b", destination = "b" }]',
    "[agent]\ntimeout_sec = -1\nuser = 1000",  # Harbor takes a negative timeout; we refuse it
]


def test_harbor_compat_agrees_with_harbors_task_model() -> None:
    """Each case: Harbor 0.25's own TaskConfig (in its venv) refuses it exactly when
    harbor_compat warns, and the warning names a field."""
    import tomllib

    from harbor_openenv.tasks.harbor_rules import config_warnings

    venv = HARBOR_VENV
    code = (
        "import json, sys\n"
        "from harbor.models.task.config import TaskConfig\n"
        "out = []\n"
        "for text in json.load(sys.stdin):\n"
        "    try:\n"
        "        TaskConfig.model_validate_toml(text)\n"
        "        out.append(None)\n"
        "    except Exception as exc:\n"
        "        out.append(str(exc).splitlines()[0])\n"
        "print(json.dumps(out))\n"
    )
    harbor = subprocess.run(
        [str(venv / "bin" / "python"), "-W", "ignore", "-c", code],
        input=json.dumps(HARBOR_CASES),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    verdicts = json.loads(harbor.stdout)
    disagreements = []
    for text, refused in zip(HARBOR_CASES, verdicts, strict=True):
        ours = config_warnings(tomllib.loads(text))
        if bool(ours) != bool(refused) or any(not field for field, _ in ours):
            disagreements.append((text, refused, ours))
    assert not disagreements, disagreements
    assert sum(verdict is not None for verdict in verdicts) >= 30  # the cases do test refusals
