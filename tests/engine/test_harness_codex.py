"""The codex harness (harness/codex.py) inside a real no-network task container: Codex CLI,
installed offline from its npm pack, reaches a scripted vLLM-like model through the relay and
OpenEnv's capture proxy, performs the scripted fix and the fixture task's verifier passes; a
model that never answers gives "timeout", one that fails gives "crashed", each with an error.
Through a real server, the rollout action runs it on a no-network task (from the helper's volume,
where the server put it) and grades it."""

from __future__ import annotations

import io
import os
import shutil
import tarfile

import pytest
from _model import Call, Say, ScriptedModel, capture_proxy
from _server import FIXTURE_TASKS, Server

from harbor_openenv.harness.base import Budget, HarnessRun, ModelEndpoint
from harbor_openenv.harness.codex import Codex
from harbor_openenv.sandbox import remove_containers
from harbor_openenv.sandbox.spec import ContainerSpec
from harbor_openenv.sandbox.starter import DockerStarter

pytestmark = pytest.mark.docker

TASK = FIXTURE_TASKS / "edit-file"  # "Write the number 42 into answer.txt"


@pytest.fixture(scope="module")
def codex(codex_package):
    """One harness for the module: its install archive is made once."""
    return Codex(codex_package)


@pytest.fixture(scope="module")
def box(docker_client):
    """A container of the fixture task's image (built here, with no network) as a no-network
    task gets it: network none, workdir /work, which the agent (nobody) owns."""
    owner = f"test-codex-{os.getpid()}"
    image, _ = docker_client.images.build(
        path=str(TASK / "environment"), network_mode="none", labels={"test-owner": owner}, rm=True
    )
    backend = DockerStarter(lambda: docker_client, owner=owner)
    sandbox = backend.start(ContainerSpec(image.id, network="none"), task_id="codex")
    assert sandbox.workdir == "/work"  # the image's WORKDIR
    assert sandbox.exec_root("chown nobody /work").exit_code == 0
    yield sandbox
    sandbox.remove()
    remove_containers(docker_client, owner=owner)
    docker_client.images.remove(image.id, force=True)


def harness_run(box, base_url: str, api_key: str = "none", timeout_s: float = 240) -> HarnessRun:
    return HarnessRun(
        sandbox=box,
        instruction=(TASK / "instruction.md").read_text(),
        user="nobody",
        workdir="/work",
        model=ModelEndpoint(base_url=base_url, api_key=api_key, model="scripted"),
        budget=Budget(max_turns=10, timeout_s=timeout_s),
    )


def verify(box) -> str:
    """The fixture task's own verifier, staged and run as Harbor would, and its reward."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        tar.add(TASK / "tests" / "test.sh", arcname="test.sh")
    box.import_archive("/tests", io.BytesIO(archive.getvalue()))
    ran = box.exec_root("bash /tests/test.sh && cat /logs/verifier/reward.txt")
    assert ran.exit_code == 0, ran.output
    return ran.output.strip()


def test_codex_inside_a_no_network_container_does_the_scripted_fix(box, codex):
    script = [Call("echo 42 > answer.txt"), Say("I wrote 42 into answer.txt.")]
    with ScriptedModel(script) as model, capture_proxy(model) as (proxy_url, registry):
        session = registry.create(capture_level="tokens")
        result = codex.run(harness_run(box, proxy_url, session.session_id))
        turns = session.graph.nodes()
    assert (result.status, result.error) == ("completed", None), result.log
    assert '"turn.completed"' in result.log
    assert box.exec_root("stat -c %U /work/answer.txt").output.strip() == "nobody"
    assert verify(box) == "1"
    # both model calls went through the capture proxy, which kept their token ids
    assert len(model.requests) == 2 and model.requests[0]["return_token_ids"] is True
    assert [len(turn.prompt_ids) > 0 and len(turn.sampled_ids) > 0 for turn in turns] == [True] * 2
    assert box.exec_root("ls /opt/harbor-openenv/codex/bin").output.split() == ["codex"]


def test_a_model_that_never_answers_is_a_timeout(box, codex):
    with ScriptedModel([], mode="hang") as model:
        result = codex.run(harness_run(box, model.base_url, timeout_s=25))
    assert result.status == "timeout" and "25 s" in (result.error or ""), result
    print(f"timeout: {result.error}")
    assert model.requests  # it was asked


def test_a_model_that_fails_is_a_crash_with_its_error(box, codex):
    with ScriptedModel([], mode="crash") as model:
        result = codex.run(harness_run(box, model.base_url))
    assert result.status == "crashed" and result.error, result
    assert model.requests
    print(f"crashed: {result.error}")


def test_an_unreachable_model_is_a_crash(box, codex):
    with ScriptedModel([]) as model:
        port = model.port
    result = codex.run(harness_run(box, f"http://127.0.0.1:{port}/v1"))
    assert result.status == "crashed" and result.error, result
    print(f"unreachable: {result.error}")


@pytest.mark.parametrize("base", ["debian:bookworm-slim", "ubuntu:22.04"])
def test_a_rollout_of_codex_on_a_no_network_task_through_the_server(codex_package, tmp_path, base):
    """The rollout action names "codex": the server installs it in the task's no-network
    container (on Debian and on Ubuntu), relays its model port to the server's capture proxy, and
    grades the fix (1.0)."""
    task = tmp_path / "tasks" / "edit-file-offline"
    shutil.copytree(TASK, task)
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("debian:bookworm-slim", base))
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(
        toml.replace("[environment]\n", '[environment]\nnetwork_mode = "no-network"\n')
    )
    script = [
        Call("ls /sys/class/net; [ -e /opt/harbor-openenv ] || echo none; echo 42 > answer.txt"),
        Say("I wrote 42 into answer.txt."),
    ]
    server = Server(tmp_path / "tasks", HARBOR_OPENENV_CODEX_PACKAGE=str(codex_package))
    try:
        with ScriptedModel(script) as model, server.client() as env:
            env.reset(task_id="edit-file-offline")
            answer = env.rollout(
                "codex", base_url=model.base_url, model="scripted", max_turns=10, timeout_s=240
            ).observation
            requests = list(model.requests)
    finally:
        server.stop()
    assert answer.error is None, answer.error
    assert (answer.action_type, answer.done, answer.reward) == ("rollout", True, 1.0)
    captured = answer.info["rollout"]
    assert captured["harness"] == "codex" and captured["status"] == "completed", captured
    assert len(captured["turns"]) == 2 and all(t["completion_token_ids"] for t in captured["turns"])
    # what the command saw, sent back to the model: loopback only, no network interface; and
    # codex ran from the helper's volume (the server put it there once), nothing uploaded
    (seen,) = [m["content"] for m in requests[1]["messages"] if m.get("role") == "tool"]
    assert seen.split("Output:", 1)[1].split() == ["lo", "none"], seen
