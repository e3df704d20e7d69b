"""The harness cache's harnesses (harness/cached.py) through a real server: the rollout action
names one, the server runs its build from the helper's volume (the cache, put there once) in the
task's no-network container as Harbor's agent class runs it, its model calls go through the
relay, the keyed port and OpenEnv's capture proxy (the harness's dialect) to the scripted
vLLM-like model, and the task's verifier grades it: the example tasks fixed give 1.0 (on Debian
and on Ubuntu), a non-fix 0.0, and each turn's token ids are the scripted model's. An image that
cannot run the build gives one clear error, before the harness starts."""

from __future__ import annotations

import re
import shutil
import textwrap

import pytest
from _model import Call, Edit, Read, Say, ScriptedModel
from _server import ROOT, Server

pytestmark = pytest.mark.docker

EXAMPLES = ROOT / "examples" / "dataset" / "tasks"
HARNESSES = ["claude-code", "gemini-cli", "qwen-code", "opencode", "pi", "aider"]
SHELL_HARNESSES = [name for name in HARNESSES if name != "aider"]  # aider only edits files
NODE_HARNESSES = ["gemini-cli", "qwen-code", "pi"]  # on the cache's node: glibc's build only
FIXES = {
    "hello-world": "printf 'Hello, world!\\n' > /app/hello.txt",
    # not `sed -i`: qwen-code's shell tool refuses an in-place edit of a file its read_file tool
    # has not read in the session
    "fix-sum-bug": "python3 -c \"import pathlib; p = pathlib.Path('/app/sum_utils.py'); "
    "p.write_text(p.read_text().replace('range(1, len(numbers))', 'range(len(numbers))'))\"",
}
# The same fix on the second stand-in distribution (.ci/standin-images.sh): Ubuntu's layout and
# its older glibc (2.35 to Debian bookworm's 2.36)
DISTROS = {"hello-world-ubuntu": "FROM ubuntu:22.04\nWORKDIR /app\n"}
TASKS = {**FIXES, **dict.fromkeys(DISTROS, FIXES["hello-world"])}
# aider's fixes: the files' whole new text, in its edit format (it runs no command of the model's)
SUM_UTILS = (EXAMPLES / "fix-sum-bug" / "environment" / "sum_utils.py").read_text()
EDITS = {
    "hello-world": Edit("hello.txt", "Hello, world!\n"),
    "fix-sum-bug": Edit("sum_utils.py", SUM_UTILS.replace("range(1, len(", "range(len(")),
}
EDITS.update(dict.fromkeys(DISTROS, EDITS["hello-world"]))
AIDER_TURNS = {"fix-sum-bug": 2}  # sum_utils.py is the task's: added to the chat first
# Images that cannot run a build: busybox's shell and tools (a two-line `bash` that is
# busybox's sh) with glibc's loader but no libc.so.6, with musl's C library (no Node build), or
# with no C library at all.
BUSYBOX = """\
FROM debian:bookworm-slim AS tools
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends busybox-static musl
FROM scratch AS busybox
COPY --from=tools /bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN printf '#!/bin/sh\\nexec /bin/sh "$@"\\n' > /bin/bash && chmod 755 /bin/bash \\
  && mkdir -p /tmp /app /root && chmod 1777 /tmp \\
  && echo root:x:0:0:root:/root:/bin/sh > /etc/passwd && echo root:x:0: > /etc/group
WORKDIR /app
"""
IMAGES = {
    "glibc-loader": "COPY --from=tools /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 /lib64/\n",
    "musl": "COPY --from=tools /usr/lib/x86_64-linux-musl/libc.so /lib/ld-musl-x86_64.so.1\n",
    "no-libc": "",
}


def offline(source, target) -> None:
    """A copy of the task ``source`` at ``target``, no-network."""
    shutil.copytree(source, target)
    toml = (target / "task.toml").read_text()
    (target / "task.toml").write_text(
        toml.replace("[environment]\n", '[environment]\nnetwork_mode = "no-network"\n')
    )


@pytest.fixture(scope="module")
def srv(docker_client, harness_cache, tmp_path_factory):
    tasks = tmp_path_factory.mktemp("tasks")
    for name in FIXES:
        offline(EXAMPLES / name, tasks / name)
    for image, lines in IMAGES.items():
        task = tasks / f"hello-world-{image}"
        offline(EXAMPLES / "hello-world", task)
        (task / "environment" / "Dockerfile").write_text(BUSYBOX + lines)
    for name, dockerfile in DISTROS.items():
        offline(EXAMPLES / "hello-world", tasks / name)
        (tasks / name / "environment" / "Dockerfile").write_text(dockerfile)
    server = Server(
        tasks, HARBOR_OPENENV_HARNESS_CACHE=str(harness_cache), HARBOR_OPENENV_BUILD_NETWORK="host"
    )
    yield server
    server.stop()


def rollout(srv, harness, task, script, *, timeout_s=240):
    """A rollout of ``harness`` on ``task`` whose model answers ``script``."""
    with ScriptedModel(script) as model:
        limits = {"max_turns": 10, "timeout_s": timeout_s}
        answer = srv.rollout(task, harness, base_url=model.base_url, model="scripted", **limits)
    return answer, model


def tool_outputs(model) -> str:
    """What the harness's tool calls returned to the model, in the harness's own wording."""
    return " ".join(
        str(m.get("content")) for r in model.requests for m in r["messages"] if m["role"] == "tool"
    )


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("harness", HARNESSES)
def test_the_harness_fixes_the_task_with_each_turns_tokens(srv, harness, task):
    # aider: an answer that names a file of the task's adds it to the chat and asks again, with
    # the file's text, before any edit is made; the model gives the same answer then
    script = [EDITS[task]] * 2 if harness == "aider" else [Call(TASKS[task]), Say("Fixed.")]
    answer, model = rollout(srv, harness, task, script)
    assert answer.error is None, (answer.error, answer.info.get("rollout"))
    outcome = (answer.action_type, answer.done, answer.reward)
    assert outcome == ("rollout", True, 1.0), tool_outputs(model)
    captured = answer.info["rollout"]
    assert captured["harness"] == harness and captured["status"] == "completed", captured
    turns = captured["turns"]
    # the script's turns (aider's one, or two where it names a file of the task's); a side call
    # (a title) is one more
    assert len(model.requests) == (AIDER_TURNS.get(task, 1) if harness == "aider" else 2)
    assert len(turns) == len(model.sent) >= len(model.requests)

    def ids(items):  # a side call runs beside the first turn: compared in no order
        return sorted((t["prompt_token_ids"], t["completion_token_ids"]) for t in items)

    assert ids(turns) == ids(model.sent)
    assert all(len(t["logprobs"]) == len(t["completion_token_ids"]) for t in turns)


def test_a_non_fix_by_aider_gives_zero(srv):
    answer, model = rollout(srv, "aider", "hello-world", [Edit("other.txt", "hello\n")])
    assert (answer.error, answer.reward) == (None, 0.0), answer
    assert answer.info["rollout"]["status"] == "completed"
    assert len(model.requests) == 1


@pytest.mark.parametrize("harness", SHELL_HARNESSES)
def test_a_non_fix_gives_zero(srv, harness):
    # no command substitution: gemini-cli's shell tool refuses $(...). The listing is read back
    # through the harness's file tool: qwen-code's shell can lose a command's output (it settles
    # on the child's exit before stdout has drained).
    listing = "ls /sys/class/net | sed 's/^/net=/' > /app/net.txt"
    script = [Call(f"{listing}; echo hello > /app/other.txt"), Read("/app/net.txt"), Say("Done.")]
    answer, model = rollout(srv, harness, "hello-world", script)
    assert (answer.error, answer.reward) == (None, 0.0), answer
    assert answer.info["rollout"]["status"] == "completed"
    # what the command saw: loopback only, no network interface
    outputs = tool_outputs(model)
    assert re.findall(r"net=(\w+)", outputs) == ["lo"], outputs


UNFIT = [
    (harness, "hello-world-glibc-loader", f"its linux-x64 build{of} cannot load in this image:")
    for harness, of in (
        ("claude-code", ""),
        ("opencode", ""),
        *((name, " of node") for name in NODE_HARNESSES),
    )
]
UNFIT += [
    (harness, "hello-world-musl", "the harness cache holds no linux-x64-musl build for this musl")
    for harness in NODE_HARNESSES
]
UNFIT += [
    (harness, "hello-world-no-libc", "the image has no C library loader")
    for harness in SHELL_HARNESSES  # aider carries its own C library
]


@pytest.mark.parametrize(("harness", "task", "reason"), UNFIT)
def test_an_image_that_cannot_run_the_build_is_one_clear_error(srv, harness, task, reason):
    answer, model = rollout(srv, harness, task, [Say("Done.")], timeout_s=60)
    assert answer.reward is None and answer.done, answer
    expected = f"rollout: the harness crashed: {harness} cannot run in this container:"
    assert answer.error.startswith(expected) and reason in answer.error, answer.error
    assert "\n" not in answer.error
    assert model.requests == []  # it never started
    print(textwrap.shorten(answer.error, 300))
