"""How a cached harness's recorded steps are replayed (harness/cached.py): placeholders in a
command line become the relayed URL, the model's name and the instruction as one shell word; a
config file Harbor's class uploads (pi's models.json) is written with them; opencode's and pi's
JSON events say whether it failed."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from _fake_sandbox import FakeSandbox

from harbor_openenv.config import Settings
from harbor_openenv.harness.base import Budget, HarnessError, HarnessRun, ModelEndpoint
from harbor_openenv.harness.cache import BUILDS, MOUNTED
from harbor_openenv.harness.cached import (
    INSTRUCTION,
    KINDS,
    UNFIT,
    CachedHarness,
    aider_failure,
    from_settings,
    opencode_failure,
    pi_failure,
)

pytestmark = pytest.mark.unit

HOSTILE = 'fix it; it\'s "$(touch /tmp/pwned)" `id` $HOME\nand a second line'


def run(model: str = "Qwen/Qwen3-8B", instruction: str = HOSTILE) -> HarnessRun:
    endpoint = ModelEndpoint("http://127.0.0.1:9000/v1", "session", model)
    return HarnessRun(FakeSandbox(), instruction, "root", "/app", endpoint, Budget(5, 60))


def opencode() -> CachedHarness:
    dialect, failure = KINDS["opencode"]
    return CachedHarness(BUILDS["opencode"], dialect, failure)


def test_opencodes_config_names_the_relayed_url_and_the_model():
    harness, episode = opencode(), run()
    config, _ = harness.steps
    command = harness.command(config["command"], episode)
    written = json.loads(command.split("echo '", 1)[1].rsplit("' >", 1)[0])
    assert written["provider"]["vllm"]["options"]["baseURL"] == "http://127.0.0.1:4181/v1"
    assert list(written["provider"]["vllm"]["models"]) == ["Qwen/Qwen3-8B"]
    assert "harbor-openenv" not in command.replace("harbor-openenv-key", "")


def test_the_instruction_is_one_word_the_shell_never_expands(tmp_path):
    harness, episode = opencode(), run()
    _, step = harness.steps
    command = harness.command(step["command"], episode)
    assert "--model=vllm/Qwen/Qwen3-8B run" in command
    words = command.split(" -- ", 1)[1].split(" 2>&1", 1)[0]
    env = {**harness.environment(step["env"], episode), "PATH": "/usr/bin:/bin"}
    shown = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {words}"], env=env, capture_output=True, check=True
    ).stdout
    assert shown.split(b"\0")[:-1] == [HOSTILE.encode()]
    assert env[INSTRUCTION] == HOSTILE and env["OPENAI_API_KEY"] == "harbor-openenv-key"


def test_a_model_name_that_needs_quoting_is_refused_in_one_line():
    harness = opencode()
    _, step = harness.steps
    with pytest.raises(HarnessError, match=r"takes the model's name on its command line") as err:
        harness.command(step["command"], run(model="m' && curl x #"))
    assert "\n" not in str(err.value)


def test_claude_codes_commands_hold_no_placeholder_to_replace():
    dialect, failure = KINDS["claude-code"]
    harness = CachedHarness(BUILDS["claude-code"], dialect, failure)
    episode = run(model="any name, quoted or not")
    assert [harness.command(s["command"], episode) for s in harness.steps] == [
        s["command"] for s in harness.steps
    ]


def test_opencodes_events_say_whether_it_failed():
    ok = "\n".join(json.dumps(e) for e in ({"type": "step_start"}, {"type": "step_finish"}))
    assert opencode_failure(ok) is None
    error = {"type": "error", "error": {"name": "APIError", "data": {"message": "no model x"}}}
    assert opencode_failure(ok + "\n" + json.dumps(error)) == "no model x"
    assert opencode_failure("bash: opencode: not found") == "opencode reported no event"


def test_a_cache_without_opencode_says_how_to_fill_it(tmp_path):
    from harbor_openenv.config import Settings

    settings = Settings(harness_cache=tmp_path)
    with pytest.raises(HarnessError, match=r"harnesses fill .* opencode"):
        from_settings("opencode", settings)


def pi() -> CachedHarness:
    dialect, failure = KINDS["pi"]
    return CachedHarness(BUILDS["pi"], dialect, failure)


def test_pis_uploaded_models_json_is_written_by_the_agents_user_with_the_relayed_url(tmp_path):
    harness, episode = pi(), run()
    (upload,) = [step for step in harness.steps if "upload" in step]
    command, env = harness.shell(upload, episode)
    target = tmp_path / "agent dir" / "models.json"
    script = command.replace(upload["upload"], shlex.quote(str(target)))
    subprocess.run(["bash", "-c", script], env={**env, "PATH": "/usr/bin:/bin"}, check=True)
    provider = json.loads(target.read_text())["providers"]["harbor-endpoint"]
    assert provider["baseUrl"] == "http://127.0.0.1:4181/v1"
    assert provider["models"] == [{"id": "Qwen/Qwen3-8B"}]
    assert provider["apiKey"] == "$OPENAI_API_KEY"  # the placeholder key, from its environment
    assert "harbor-openenv" not in target.read_text()


def test_a_model_name_that_needs_quoting_is_refused_in_an_uploaded_file_too():
    harness = pi()
    (upload,) = [step for step in harness.steps if "upload" in step]
    with pytest.raises(HarnessError, match=r"takes the model's name"):
        harness.shell(upload, run(model='m", "x": "y'))


def test_pis_events_say_whether_it_failed():
    end = {"type": "message_end", "message": {"role": "assistant", "stopReason": "stop"}}
    ok = "\n".join(json.dumps(e) for e in ({"type": "agent_start"}, end))
    assert pi_failure(ok) is None
    failed = {"role": "assistant", "stopReason": "error", "errorMessage": "401 no key"}
    error = {"type": "message_end", "message": failed}
    assert pi_failure(ok + "\n" + json.dumps(error)) == "401 no key"
    assert pi_failure("sh: pi: not found") == "pi reported no event"


@pytest.fixture
def aider_cache(tmp_path):
    """A harness cache that holds aider's manifest only."""
    (tmp_path / "aider").mkdir()
    (tmp_path / "aider" / "harness.json").write_text('{"name": "aider"}')
    return tmp_path


def test_aiders_command_runs_the_caches_build_with_its_settings_and_no_installer_line(
    aider_cache,
):
    harness = from_settings("aider", Settings(harness_cache=aider_cache))
    episode = run()
    (step,) = harness.steps
    command = harness.command(step["command"], episode)
    assert ". $HOME/.local/bin/env" in step["command"]  # Harbor's: its installer's env file
    assert ".local/bin/env" not in command and command.startswith("set -o pipefail; ")
    assert "aider --yes " in command and "--model=openai/Qwen/Qwen3-8B" in command
    env = harness.environment(step["env"], episode)
    # the model's settings file, JSON with the URL inside it, names the relayed port
    (settings,) = json.loads(env["AIDER_API_KEY_SETTINGS"])
    assert settings["extra_params"]["api_base"] == "http://127.0.0.1:4181/v1"
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:4181/v1"
    assert env["OPENAI_API_KEY"] == "harbor-openenv-key"  # the keyed port sets the real one
    assert (env["AIDER_CHECK_UPDATE"], env["AIDER_ANALYTICS_DISABLE"]) == ("false", "true")


def test_aiders_probe_needs_nothing_of_the_image_but_its_architecture(aider_cache, tmp_path):
    """aider's build carries its own loader and C library: the probe checks no image loader,
    only the machine's folder (there is one platform, the filling machine's)."""
    harness = from_settings("aider", Settings(harness_cache=aider_cache))
    assert harness.probe_args("/c") == ["/c/aider", "bin/aider"]
    machine = subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout.strip()
    platform = {"x86_64": "linux-x64", "aarch64": "linux-arm64"}[machine]
    cache = tmp_path / "mounted"
    (cache / "aider" / platform / "bin").mkdir(parents=True)
    (cache / "aider" / platform / "bin" / "aider").write_text("#!/bin/sh\n")
    (cache / "aider" / platform / "bin" / "aider").chmod(0o755)
    line = harness.probe_line().replace(MOUNTED, str(cache))
    assert "--list" not in line  # no image loader asked to load anything
    probe = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=False)
    assert probe.stdout.splitlines() == [f"{cache}/aider/{platform}"], probe
    (cache / "aider" / platform / "bin" / "aider").unlink()
    probe = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=False)
    assert probe.returncode == 3, probe
    assert probe.stdout == f"{UNFIT}the harness cache holds no {platform} build\n"


@pytest.mark.parametrize(
    ("output", "error"),
    [
        ("Applied edit to hello.txt\n", None),
        (
            "litellm.APIConnectionError: APIConnectionError: OpenAIException - Connection error.\n"
            "Retrying in 0.2 seconds...\n"
            "litellm.APIConnectionError: APIConnectionError: OpenAIException - Connection error.\n",
            "litellm.APIConnectionError: APIConnectionError: OpenAIException - Connection error.",
        ),
        ("litellm.BadRequestError: OpenAIException - no model x\n", "litellm.BadRequestError:"),
    ],
)
def test_aiders_model_errors_are_read_from_its_output(output, error):
    found = aider_failure(output)
    assert (found is None) if error is None else (found is not None and found.startswith(error))
