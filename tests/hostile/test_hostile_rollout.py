"""A hostile agent through the rollout path: the scripted model (the one double) makes the real
harness plant rewards, hunt for secrets and reach for the server, with both kinds of harness:
mini-swe-agent and terminus-2 (a server from the Python 3.12 venv) beside the container, codex
and each harness of the harness cache inside it. The stop before grading
and the verifier decide the reward, as for evaluate; nothing the container can read holds the
orchestration token, the trainer's key or the harness's session key (an inside harness's calls
get it on the server's side, from the keyed port); the server's port is out of the container's
reach."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shlex
import shutil

import pytest
from _interop import HARBOR_SERVER_PYTHON
from _model import Call, Read, Say
from _model import ScriptedModel as CodexModel
from _scripted_model import SUBMIT, ScriptedModel
from _server import TOKEN, Server

from .test_hostile_verifier import PLANT_JSON, make_task

pytestmark = pytest.mark.docker

TRAINER_KEY = "trainer-secret-key-0123456789"
PLANT = (
    f"echo {base64.b64encode(PLANT_JSON.encode()).decode()} | base64 -d > plant.sh"
    " && (setsid bash plant.sh </dev/null >/dev/null 2>&1 &); sleep 0.5;"
    " echo 1 > /logs/verifier/reward.txt; cat /logs/verifier/reward.json"
)
HUNT = (
    "id; env; tr '\\0' '\\n' < /proc/1/environ; ps -eo args;"
    " for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null | sort -u"
)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    make_task(root, "grade")
    make_task(root, "grade-nobody", toml='\n[agent]\nuser = "nobody"\n')
    return root


@pytest.fixture(scope="module")
def srv(docker_client, tasks, codex_package):
    server = Server(tasks, HARBOR_OPENENV_CODEX_PACKAGE=str(codex_package))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def model(srv):
    scripts = {"plant": [PLANT, SUBMIT], "hunt": [HUNT, reach_server(srv), SUBMIT]}
    with ScriptedModel(scripts) as scripted:
        yield scripted


def reach_server(srv) -> str:
    return (
        f"(exec 3<>/dev/tcp/127.0.0.1/{srv.port}) 2>/dev/null && echo REACHED-SERVER"
        " || echo server-unreachable"
    )


def rollout(srv, model, task, script, harness="mini-swe-agent", max_turns=5, timeout_s=120):
    """A rollout of ``harness`` on ``task``, the trainer's key given, ``model`` answering the
    script named ``script``."""
    fields = {"api_key": TRAINER_KEY, "max_turns": max_turns, "timeout_s": timeout_s}
    return srv.rollout(task, harness, base_url=model.base_url, model=script, **fields)


@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
def test_a_reward_the_harness_planted_does_not_count(srv, model, task):
    answer = rollout(srv, model, task, "plant")
    assert answer.info["rollout"]["status"] == "completed", answer.error
    planted = model.turns("plant")[-1]["messages"][-1]["content"]
    if task == "grade":  # root: the planter ran (nobody may not write /logs/verifier at all)
        assert '{\\"reward\\": 1}' in planted, planted
    assert (answer.reward, answer.error) == (0.0, None), answer


@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
def test_the_container_holds_no_secret_and_cannot_reach_the_server(srv, model, task):
    answer = rollout(srv, model, task, "hunt")
    session_key = answer.info["rollout"]["session_id"]
    assert answer.info["rollout"]["status"] == "completed", answer.error
    seen = json.dumps([call["messages"] for call in model.turns("hunt")])
    outputs = " ".join(
        str(m["content"]) for c in model.turns("hunt") for m in c["messages"] if m["role"] == "tool"
    )
    assert "server-unreachable" in outputs and "REACHED-SERVER" not in outputs
    assert "HOSTNAME" in outputs  # the hunt's output did come back to the model
    last = " ".join(str(m["content"]) for m in model.turns("hunt")[-1]["messages"])
    assert ("uid=65534(nobody)" if task == "grade-nobody" else "uid=0(root)") in last
    for secret in (TOKEN, TRAINER_KEY, session_key):
        assert secret not in seen
    # the trainer's key reaches the trainer's endpoint, the session key never does
    auth = {h.get("authorization") for h in model.headers[-3:]}
    assert auth == {f"Bearer {TRAINER_KEY}"}
    assert TRAINER_KEY not in json.dumps(answer.model_dump())


def codex_rollout(srv, task, script):
    """A codex rollout on ``task`` whose model answers ``script``: the answer and the model."""
    with CodexModel(script) as model:
        return rollout(srv, model, task, "scripted", "codex", 5, 180), model


def tool_outputs(model) -> str:
    """What the harness sent back to the model as its commands' output (a content given as
    parts: their texts)."""

    def text(content) -> str:
        if isinstance(content, list):
            return "\n".join(text(part.get("text", part)) for part in content)
        with contextlib.suppress(ValueError, LookupError, TypeError):  # gemini-cli: {"output": ...}
            return str(json.loads(content)["output"])
        return str(content)

    return " ".join(
        text(m.get("content")) for r in model.requests for m in r["messages"] if m["role"] == "tool"
    )


@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
def test_a_reward_codex_planted_does_not_count(srv, task):
    answer, model = codex_rollout(srv, task, [Call(PLANT), Say("Done.")])
    assert answer.info["rollout"]["status"] == "completed", answer.error
    if task == "grade":  # root: the planter ran (nobody may not write /logs/verifier at all)
        assert '"reward": 1}' in tool_outputs(model), tool_outputs(model)
    assert (answer.reward, answer.error) == (0.0, None), answer


@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
def test_codex_inside_finds_no_secret_and_cannot_reach_the_server(srv, task):
    script = [Call(HUNT + "; echo HUNT-END"), Call(reach_server(srv)), Say("Done.")]
    answer, model = codex_rollout(srv, task, script)
    session_key = answer.info["rollout"]["session_id"]
    assert answer.info["rollout"]["status"] == "completed", answer.error
    outputs = tool_outputs(model)
    assert "server-unreachable" in outputs and "REACHED-SERVER" not in outputs
    # the hunt's whole output came back: codex's own process and its environment among it
    assert "HUNT-END" in outputs and "CODEX_HOME=" in outputs and "codex exec" in outputs
    assert "omitted" not in outputs and "truncated" not in outputs.lower(), outputs
    assert ("uid=65534(nobody)" if task == "grade-nobody" else "uid=0(root)") in outputs
    seen = json.dumps(model.requests)
    for secret in (TOKEN, TRAINER_KEY, session_key):
        assert secret not in seen
    # the trainer's key reaches the trainer's endpoint, the session key never does
    assert {h.get("authorization") for h in model.headers} == {f"Bearer {TRAINER_KEY}"}
    assert TRAINER_KEY not in json.dumps(answer.model_dump())


# -- terminus-2 (Harbor's own agent, beside the container, driving tmux in it): a server from
# the Python 3.12 venv with the harness cache's tmux


def terminus_server(tasks, cache) -> Server:
    return Server(tasks, python=HARBOR_SERVER_PYTHON, HARBOR_OPENENV_HARNESS_CACHE=str(cache))


@pytest.fixture(scope="module")
def srv_terminus(docker_client, tasks, harness_cache):
    server = terminus_server(tasks, harness_cache)
    yield server
    server.stop()


def terminus_hunt(process: str | None = None) -> str:
    """The hunt, its output kept in the container: what comes back to the model (the pane, cut
    to 10 kB by terminus-2) is its size and how many of the secrets it holds (and how many lines
    name the harness's ``process``)."""
    secrets = base64.b64encode(f"{TOKEN}\n{TRAINER_KEY}\n".encode()).decode()
    seen = f" HUNT-PROCESS=$(grep -cE -- {shlex.quote(process)} /tmp/hunt.txt)" if process else ""
    return (
        f"({HUNT}) > /tmp/hunt.txt 2>&1; echo HUNT-LINES=$(wc -l < /tmp/hunt.txt)"
        " HUNT-ENV=$(grep -c ^HOSTNAME= /tmp/hunt.txt)"
        f" HUNT-SECRETS=$(echo {secrets} | base64 -d | grep -cFf - /tmp/hunt.txt){seen}"
    )


@pytest.fixture(scope="module")
def terminus_model(srv_terminus):
    scripts = {
        "plant": [PLANT, SUBMIT],
        "hunt": [terminus_hunt(), reach_server(srv_terminus), SUBMIT],
    }
    with ScriptedModel(scripts) as scripted:
        yield scripted


@pytest.mark.timeout(600)
@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
def test_a_reward_terminus_planted_does_not_count(srv_terminus, terminus_model, task):
    answer = rollout(srv_terminus, terminus_model, task, "plant", "terminus-2", 6, 180)
    assert answer.info["rollout"]["status"] == "completed", answer.error
    shown = terminus_model.turns("plant")[-1]["messages"][1:]
    if task == "grade":  # root: the planter ran (nobody may not write /logs/verifier at all)
        assert '"reward": 1}' in json.dumps(shown) or '{\\"reward\\": 1}' in json.dumps(shown)
    assert (answer.reward, answer.error) == (0.0, None), answer


@pytest.mark.timeout(600)
@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
def test_terminus_finds_no_secret_and_cannot_reach_the_server(srv_terminus, terminus_model, task):
    answer = rollout(srv_terminus, terminus_model, task, "hunt", "terminus-2", 6, 180)
    session_key = answer.info["rollout"]["session_id"]
    assert answer.info["rollout"]["status"] == "completed", answer.error
    calls = terminus_model.turns("hunt")[-4:]
    panes = " ".join(str(m["content"]) for m in calls[-1]["messages"] if m["role"] == "user")
    assert "server-unreachable" in panes and "REACHED-SERVER" not in panes.replace(
        "&& echo REACHED-SERVER", ""
    )
    found = dict(
        word.split("=", 1) for word in panes.split() if word.startswith("HUNT-") and "=" in word
    )
    assert int(found["HUNT-LINES"]) > 20 and int(found["HUNT-ENV"]) >= 1, panes
    assert found["HUNT-SECRETS"] == "0", panes
    last = " ".join(str(m["content"]) for m in calls[-1]["messages"])
    user = "nobody" if task == "grade-nobody" else "root"
    assert f"{user}@" in last  # the pane's prompt: the agent's user
    seen = json.dumps([call["messages"] for call in calls])
    for secret in (TOKEN, TRAINER_KEY, session_key):
        assert secret not in seen
    # the trainer's key reaches the trainer's endpoint, the session key never does
    auth = {h.get("authorization") for h in terminus_model.headers[-3:]}
    assert auth == {f"Bearer {TRAINER_KEY}"}
    assert TRAINER_KEY not in json.dumps(answer.model_dump())


@pytest.fixture(scope="module")
def srv_decoy(docker_client, tasks, harness_cache, tmp_path_factory):
    """A terminus-2 server whose harness cache holds tmux and, beside it, a folder of the
    server's host shaped as tmux's (``decoy/bin/tmux``)."""
    cache = tmp_path_factory.mktemp("cache")
    shutil.copytree(harness_cache / "tmux", cache / "tmux")
    (cache / "decoy" / "bin").mkdir(parents=True)
    (cache / "decoy" / "bin" / "tmux").write_text("#!/bin/sh\necho DECOY-RAN\n")
    server = terminus_server(tasks, cache)
    yield server
    server.stop()


@pytest.mark.timeout(600)
def test_a_forged_architecture_uploads_nothing_of_the_servers_host(srv_decoy, terminus_model):
    """terminus-2's probe runs the agent's programs: a root agent's own ``uname`` answering
    ``../decoy`` is refused in one line, before any upload (it went into the path of the folder
    the server tars, ``decoy`` beside the cache's ``tmux``)."""
    forge = "printf '#!/bin/sh\\necho ../decoy\\n' > /usr/local/bin/uname"
    with srv_decoy.client() as env:
        env.reset(task_id="grade")
        planted = env.exec(f"{forge} && chmod 755 /usr/local/bin/uname && uname -m").observation
        assert planted.output.strip() == "../decoy", planted
        fields = {"api_key": TRAINER_KEY, "max_turns": 3, "timeout_s": 120}
        answer = env.rollout(
            "terminus-2", base_url=terminus_model.base_url, model="plant", **fields
        ).observation
    assert answer.reward is None and answer.info["rollout"]["status"] == "crashed", answer
    assert "terminus-2 has no tmux for the container's '../decoy'" in answer.error, answer.error


# -- the harness cache's harnesses (inside the container, from the read-only cache, their model
# calls keyed on the server's side): each by name, as the cache fills more

CACHED = {  # name: what its own process shows in the hunt (its command line, a regex)
    "claude-code": "claude --verbose",
    "opencode": "opencode --model=",
    "gemini-cli": r"gemini\.js --yolo",  # a Node harness: the cache's node running its script
    "qwen-code": r"cli-entry\.js --yolo",
    "pi": "^pi$",  # its title
}


@pytest.fixture(scope="module")
def srv_cached(docker_client, tasks, harness_cache):
    server = Server(tasks, HARBOR_OPENENV_HARNESS_CACHE=str(harness_cache))
    yield server
    server.stop()


# What a cached harness's commands write for the test, read back through the harness's own file
# tool: qwen-code 0.24.4's one-shot shell tool (Harbor's `--prompt` run, child_process) settles on
# the child's exit and now and then shows a command's output as "(empty)".
SHOWN = "/app/shown.txt"


def opaque(command: str) -> str:
    """``command`` as a pipeline of plain words that runs it: what a harness's shell tool shows
    or checks of it (gemini-cli's refuses a command substitution) is never the hunt itself."""
    return f"echo {base64.b64encode(command.encode()).decode()} | base64 -d | bash"


def cached_rollout(srv, harness, task, script):
    """A rollout of the cached ``harness`` on ``task`` whose model answers ``script`` (each
    command run :func:`opaque`)."""
    script = [Call(opaque(turn.command)) if isinstance(turn, Call) else turn for turn in script]
    with CodexModel(script) as model:
        return rollout(srv, model, task, "scripted", harness, 6, 240), model


@pytest.mark.timeout(600)
@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
@pytest.mark.parametrize("harness", sorted(CACHED))
def test_a_reward_a_cached_harness_planted_does_not_count(srv_cached, harness, task):
    # the planter given up to 10 s to write (a loaded engine: claude-code's Bash saw no file yet);
    # what it printed read back through the harness's file tool (SHOWN)
    wait = "for i in $(seq 50); do [ -s /logs/verifier/reward.json ] && break; sleep 0.2; done;"
    plant = PLANT.replace("sleep 0.5;", wait)
    script = [Call(f"({plant}) > {SHOWN} 2>&1"), Read(SHOWN), Say("Done.")]
    answer, model = cached_rollout(srv_cached, harness, task, script)
    assert answer.info["rollout"]["status"] == "completed", answer.error
    if task == "grade":  # root: the planter ran (nobody may not write /logs/verifier at all)
        assert '"reward": 1}' in tool_outputs(model), tool_outputs(model)
    assert (answer.reward, answer.error) == (0.0, None), answer


@pytest.mark.timeout(600)
@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
@pytest.mark.parametrize("harness", sorted(CACHED))
def test_a_cached_harness_finds_no_secret_and_cannot_reach_the_server(srv_cached, harness, task):
    # the hunt counted in the container (its whole output, however the harness cuts what it
    # shows), the agent's uid and the server's reach, read back through the harness's file tool
    # (SHOWN); then the hunt shown to the model as it is (for the session's key, known only
    # afterwards)
    checks = f"{terminus_hunt(CACHED[harness])}; id; {reach_server(srv_cached)}"
    script = [
        Call(f"({checks}) > {SHOWN} 2>&1"),
        Read(SHOWN),
        Call(HUNT + "; echo HUNT-END"),
        Say("Done."),
    ]
    answer, model = cached_rollout(srv_cached, harness, task, script)
    session_key = answer.info["rollout"]["session_id"]
    assert answer.info["rollout"]["status"] == "completed", answer.error
    outputs = tool_outputs(model)
    found = dict(re.findall(r"(HUNT-[A-Z]+)=(\d+)", outputs))
    assert int(found["HUNT-LINES"]) > 20 and int(found["HUNT-ENV"]) >= 1, outputs
    assert found["HUNT-SECRETS"] == "0", outputs
    assert "server-unreachable" in outputs and "REACHED-SERVER" not in outputs
    assert int(found["HUNT-PROCESS"]) >= 1, outputs  # the hunt saw the harness's own process
    assert ("uid=65534(nobody)" if task == "grade-nobody" else "uid=0(root)") in outputs
    seen = json.dumps(model.requests)
    for secret in (TOKEN, TRAINER_KEY, session_key):
        assert secret not in seen
    # the trainer's key reaches the trainer's endpoint, the session key never does
    assert {h.get("authorization") for h in model.headers} == {f"Bearer {TRAINER_KEY}"}
    assert TRAINER_KEY not in json.dumps(answer.model_dump())


# aider runs no command of its model's: a shell block it suggests needs an explicit yes, which
# Harbor's --yes never gives (here the block is the task's fix: had it run, the reward would be
# 1.0). What it does is write the files its model's answer names, as the agent's user: here the
# reward files, by their absolute paths (root may write them; the stop before grading and the
# verifier's fresh /logs/verifier leave nothing of them).
AIDER_PLANT = (
    "/logs/verifier/reward.txt\n```\n1\n```\n\n"
    '/logs/verifier/reward.json\n```\n{"reward": 1}\n```\n\n'
    "```bash\necho 42 > /app/answer.txt\n```\n"
)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
def test_a_reward_aider_planted_does_not_count_and_no_command_of_its_model_runs(srv_cached, task):
    with CodexModel([Say(AIDER_PLANT)]) as model:
        answer = rollout(srv_cached, model, task, "scripted", "aider", 6, 240)
    assert answer.info["rollout"]["status"] == "completed", answer.error
    assert (answer.reward, answer.error) == (0.0, None), answer
    seen = json.dumps(model.requests)
    session_key = answer.info["rollout"]["session_id"]
    for secret in (TOKEN, TRAINER_KEY, session_key):
        assert secret not in seen
    assert {h.get("authorization") for h in model.headers} == {f"Bearer {TRAINER_KEY}"}
