"""The newcomer's road, walked literally: only the commands the READMEs give, as written.

From a clone of this repository (as a user has one): the first command of README.md renders the
bundled example; the rendered README's blocks (found by their ``<!-- harbor-openenv:road:NAME -->``
markers, so the test and the READMEs cannot drift) then fill wheels/, build the image with no
network, serve it, and drive an episode with the trainer snippet to reward 1.0; later a newer
template release is tagged in the clone (as CONTRIBUTING.md's "Releasing" says), the rendered
CI's check-update step warns, and the rendered README's update command moves the pin.

What the test substitutes is what the READMEs leave to the user: the token (``change-me``), the
port and name the copier questions ask for (``-d port=... -d env_name=...``, so parallel runs do
not collide; the harness route's base image too, as terminus-2 needs Python 3.12 or later), the task id and the agent's tool calls in the trainer snippet, and the documented
host-network options (this engine has no bridge network). ``python3`` is this repository's venv
Python (the README's ``pip install copier`` is then a no-op instead of a system-wide install).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from _engines import Engine
from _remote import remote_engine
from _server import CODEX_PLATFORMS, CODEX_VERSION
from _template_helpers import REPO, VENV_BIN, commit_all, git, readme_block, shell

pytestmark = pytest.mark.docker

TOKEN = "road-" + uuid.uuid4().hex[:12]
# One name for both routes: the same pyproject.toml, so the second build reuses the first's layers.
NAME = f"road-{uuid.uuid4().hex[:8]}-env"
TASK_PLACEHOLDER = '"<a task id: its folder under tasks/>"'


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def trainer(readme: str, port: int) -> str:
    """The rendered README's trainer snippet with the user's task and the agent's tool calls."""
    snippet = readme_block(readme, "trainer")
    assert f'"http://localhost:{port}"' in snippet and "orchestration_token=TOKEN" in snippet
    assert TASK_PLACEHOLDER in snippet
    snippet = snippet.replace(TASK_PLACEHOLDER, '"hello-world"')
    agent_call = 'env.write("notes.txt", "hello\\n")'
    assert agent_call in snippet
    return snippet.replace(agent_call, 'env.write("hello.txt", "Hello, world!\\n")')


def trainer_venv(readme: str, cwd: Path) -> Path:
    """A fresh virtual environment (the trainer's) with the README's client install run in it."""
    venv = cwd.parent / f"trainer-venv-{uuid.uuid4().hex[:8]}"
    subprocess.run([str(VENV_BIN / "python"), "-m", "venv", str(venv)], check=True)
    install = readme_block(readme, "trainer-install")
    environ = {
        **os.environ,
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
    }
    result = subprocess.run(
        ["bash", "-c", install], cwd=cwd, env=environ, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return venv


def run_trainer(snippet: str, cwd: Path, venv: Path) -> str:
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", snippet],
        cwd=cwd,
        env={**os.environ, "HARBOR_OPENENV_ORCHESTRATION_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A clone of this repository with the working tree committed (as a user's checkout)."""
    clone = tmp_path / "harbor-openenv"
    git("clone", "--quiet", "--no-hardlinks", str(REPO), str(clone), cwd=REPO)
    git("rm", "-rq", ".", cwd=clone)
    files = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO)
    for name in filter(None, files.split("\0")):
        if (REPO / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    commit_all(clone, "the working tree", allow_empty=True)
    return clone


def render(checkout: Path, port: int, name: str, *answers: str) -> Path:
    """README.md's first command, as written, plus the copier answers for port and name (and
    ``answers``, each NAME=VALUE)."""
    first = readme_block((REPO / "README.md").read_text(), "render").splitlines()[0]
    assert first.startswith("$ ") and '"$PWD"' in first and "scripts/copy" in first
    command = first[2:] + f" -d port={port} -d env_name={name}"
    command += "".join(f" -d {answer}" for answer in answers)
    output = shell(command, cwd=checkout)
    assert "not a published release: built harbor_openenv-" in output
    env = checkout.parent / "example-env"
    answers = yaml.safe_load((env / ".copier-answers.yml").read_text())
    assert answers["_src_path"] == str(checkout) and answers["dataset_path"] == "bundled:example"
    assert "copier._vcs.clone" not in (env / ".copier-answers.yml").read_text()
    # what copier's message says to do next
    shell('git init -q && git add -A && git commit -qm "Initial commit"', cwd=env)
    return env


@pytest.fixture(scope="module", autouse=True)
def image_kept_for_both_routes():
    """The image both routes build, removed after the second (which reuses its install layer)."""
    yield
    subprocess.run(["docker", "rmi", "-f", NAME], capture_output=True, check=False)


def remove_containers_of(image: str) -> None:
    """Remove what still runs from ``image`` (the rendered server's container), if anything."""
    ids = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"ancestor={image}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)


def test_compose_route(checkout):
    port, name = free_port(), NAME
    env = render(checkout, port, name)
    readme = (env / "README.md").read_text()
    assert ".env" in (env / ".gitignore").read_text().splitlines()
    compose = (env / "compose.yaml").read_text()
    for option in ("HARBOR_OPENENV_NETWORK_MODE=host", "HARBOR_OPENENV_BUILD_NETWORK=none"):
        assert option in compose and option.split("=")[0] in readme
    shell(readme_block(readme, "build-offline").splitlines()[0], cwd=env)  # wheels/ only
    # The README's Compose v2 plugin, in a docker config folder of the test's own (the machine's
    # plugin stays out of it): compose failures must fail the README's commands.
    docker_config = str(env.parent / "docker-config")
    shell(readme_block(readme, "compose-plugin"), cwd=env, DOCKER_CONFIG=docker_config)
    missing = subprocess.run(
        ["docker", "compose", "-f", "/nonexistent/compose.yaml", "config"],
        env={**os.environ, "DOCKER_CONFIG": docker_config},
        capture_output=True,
    )
    assert missing.returncode != 0, "the README's compose plugin exits 0 for a missing file"
    up = readme_block(readme, "compose").replace("change-me", TOKEN)
    # the documented .env options for an engine without a bridge network and no index
    up = up.replace(
        "> .env",
        "> .env && echo HARBOR_OPENENV_NETWORK_MODE=host >> .env"
        " && echo HARBOR_OPENENV_BUILD_NETWORK=none >> .env",
        1,
    )
    shell(up, cwd=env, DOCKER_CONFIG=docker_config)
    try:
        assert wait_healthy(f"http://127.0.0.1:{port}"), shell(
            "docker compose logs", env, DOCKER_CONFIG=docker_config
        )
        out = run_trainer(trainer(readme, port), env, trainer_venv(readme, env))
        assert "reward: 1.0" in out, out
    finally:
        shell("docker compose down", cwd=env, DOCKER_CONFIG=docker_config)
    assert not subprocess.run(
        ["git", "status", "--porcelain", "--", ".env"], cwd=env, capture_output=True, text=True
    ).stdout, ".env is not ignored by git"


def test_the_offline_image_transfer(checkout, tmp_path):
    """The rendered README's `docker save` / `docker load` of the base image, then its offline
    build, against an engine that has no image at all (a `dockerd` of its own,
    tests/support/_engines.py): the machine's engine is the "connected machine" (its `docker
    pull` left out: nothing can be pulled here, and the image is already on it, which is all the
    pull ensures)."""
    port, name = free_port(), f"road-{uuid.uuid4().hex[:8]}-offline"
    env = render(checkout, port, name)
    readme = (env / "README.md").read_text()
    save = readme_block(readme, "base-image-save")
    base_image = yaml.safe_load((env / ".copier-answers.yml").read_text())["base_image"]
    pull = f"docker pull {base_image} && "
    assert save.startswith(pull), save
    shell(save.removeprefix(pull), cwd=env)
    assert (env / "base-image.tar").stat().st_size > 10e6
    engine = Engine("offline")
    try:
        assert engine.client is not None and engine.client.images.list() == []
        here = {"DOCKER_HOST": engine.host}
        shell(readme_block(readme, "base-image-load"), cwd=env, **here)
        assert [i.tags for i in engine.client.images.list()] == [[base_image]]
        (env / "base-image.tar").unlink()
        output = shell(readme_block(readme, "build-offline"), cwd=env, **here)
        assert "installed from wheels/ only" in output
        assert engine.client.images.get(name).attrs["Config"]["Cmd"][0] == "uvicorn"
    finally:
        engine.stop()


def test_docker_route_and_update(checkout):
    port, name = free_port(), NAME
    env = render(checkout, port, name)
    readme = (env / "README.md").read_text()
    started = time.monotonic()
    output = shell(readme_block(readme, "build-offline"), cwd=env)
    built = time.monotonic() - started
    assert "installed from wheels/ only" in output
    # `uv run` wrote uv.lock, which the rendered .gitignore keeps out: nothing to commit before
    # an update (which refuses a dirty tree)
    assert (env / "uv.lock").is_file() and git("status", "--porcelain", cwd=env) == ""
    wheels = list((env / "wheels").glob("*.whl"))
    size = sum(p.stat().st_size for p in wheels) / 1e6
    print(f"wheels/: {len(wheels)} wheels, {size:.0f} MB; fill + offline build {built:.0f} s")

    run = readme_block(readme, "run").replace("change-me", TOKEN)
    assert f"-p {port}:{port}" in run and "--network host" in readme
    run = run.replace(f"-p {port}:{port}", "--network host")  # the README's documented option
    server = subprocess.Popen(
        ["bash", "-c", run], cwd=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert wait_healthy(f"http://127.0.0.1:{port}"), "the server did not come up"
        metadata = httpx.get(f"http://127.0.0.1:{port}/metadata", timeout=5).json()
        print("metadata:", metadata)
        out = run_trainer(trainer(readme, port), env, trainer_venv(readme, env))
        assert "reward: 1.0" in out, out
    finally:
        server.terminate()  # docker run passes the signal on; the server removes its tasks
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        remove_containers_of(name)

    # The dataset grows: one task more, one changed; the README's "Change the dataset".
    dataset = env.parent / "my-dataset"
    shutil.copytree(REPO / "examples" / "dataset", dataset, symlinks=True)
    tasks = dataset / "tasks"
    shutil.copytree(tasks / "word-count", tasks / "word-count-2", symlinks=True)
    with (tasks / "hello-world" / "instruction.md").open("a") as handle:
        handle.write("\nNo other file is needed.\n")
    assert git("status", "--porcelain", cwd=env) == ""  # nothing to commit before the sync
    sync = readme_block(readme, "sync").replace("/path/to/dataset", str(dataset))
    output = shell(sync, cwd=env)
    assert "word-count-2" in output and "hello-world" in output, output
    assert "serves **6** tasks" in (env / "README.md").read_text()
    assert git("status", "--porcelain", cwd=env) == ""  # the block committed it

    # Months later: a newer release of the template, as CONTRIBUTING.md's "Releasing" makes one.
    version = checkout / "runtime" / "src" / "harbor_openenv" / "_version.py"
    version.write_text('__version__ = "999.0.0"\n')
    commit_all(checkout, "Release v999.0.0")
    git("tag", "v999.0.0", cwd=checkout)

    workflow = yaml.safe_load((env / ".github" / "workflows" / "ci.yml").read_text())
    (step,) = [s for s in workflow["jobs"]["template"]["steps"] if "check-update" in str(s)]
    output = shell(step["run"], cwd=env)
    assert "::warning::a newer harbor-openenv release exists" in output, output

    output = shell(readme_block(readme, "update"), cwd=env)
    assert "updated without conflicts" in output, output
    pyproject = (env / "pyproject.toml").read_text()
    assert '"harbor-openenv[server]==999.0.0"' in pyproject
    assert "_commit: v999.0.0" in (env / ".copier-answers.yml").read_text()
    assert "serves **6** tasks" in (env / "README.md").read_text()  # the sync's counts kept
    assert (env / "tasks" / "word-count-2" / "task.toml").is_file()
    commit_all(env, "update")
    output = shell(step["run"], cwd=env)
    assert "::warning::" not in output, output


def test_remote_route_with_no_socket(checkout, docker_client):
    """The rendered README's "On a Space" block: the image with no socket and no file mounted,
    the engine a remote one by TLS (a dockerd of its own on 127.0.0.1, tests/support/_remote.py),
    the certificates' contents as variables; the trainer snippet scores 1.0 and every container
    of the episode ran on the remote engine (its image built there), and nothing is left there
    after it stops."""
    port, name = free_port(), NAME
    env = render(checkout, port, name)
    readme = (env / "README.md").read_text()
    shell(readme_block(readme, "build-offline"), cwd=env)
    run = readme_block(readme, "remote").replace("change-me", TOKEN)
    assert "/var/run/docker.sock" not in run and "-v " not in run
    with remote_engine(docker_client, "road") as engine:
        shutil.copytree(engine.tls_env["DOCKER_CERT_PATH"], env / "certs")
        tcp = engine.tls_env["DOCKER_HOST"]
        run = run.replace("tcp://ENGINE_HOST:2376", tcp).replace(
            f"-p {port}:{port}",
            "--network host",  # the README's documented option
        )
        server = subprocess.Popen(
            ["bash", "-c", run], cwd=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            assert wait_healthy(f"http://127.0.0.1:{port}"), "the server did not come up"
            out = run_trainer(trainer(readme, port), env, trainer_venv(readme, env))
            assert "reward: 1.0" in out, out
            assert engine.client is not None
        finally:
            server.terminate()
            try:
                output = server.communicate(timeout=60)[0].decode(errors="replace")
            except subprocess.TimeoutExpired:
                server.kill()
                output = ""
            remove_containers_of(name)
        ours = {"label": "harbor-openenv"}
        assert engine.client.api.containers(all=True, filters=ours) == [], output
        assert engine.client.volumes.list(filters=ours) == [], output
        built = [i for i in engine.client.images.list() if "debian:bookworm-slim" not in i.tags]
        assert built, "the task's image was not built on the remote engine"


def rollout_snippet(readme: str, port: int, harness: str, base_url: str, picked: list[str]) -> str:
    """The rendered README's rollout call with the user's task, harness and endpoint; its
    comment names codex and the ``picked`` harnesses."""
    snippet = readme_block(readme, "rollout")
    assert f'"http://localhost:{port}"' in snippet and TASK_PLACEHOLDER in snippet
    offered = ", ".join(f'"{name}"' for name in ["codex", *picked])
    for old, new in (
        (TASK_PLACEHOLDER, '"hello-world"'),
        (f'"mini-swe-agent",  # or {offered}', f'"{harness}",'),
        ('"http://127.0.0.1:8001/v1"', f'"{base_url}"'),
        ('model="my-model"', 'model="scripted"'),
        ("timeout_s=900", "timeout_s=240"),
    ):
        assert old in snippet, old
        snippet = snippet.replace(old, new)
    return snippet


def test_harness_rollouts_route(checkout, docker_client, monkeypatch):
    """The rendered README's "Harness rollouts", for a repo rendered with the answers
    (terminus-2's on a base image with Python 3.13: the stand-in python:3.12-slim here runs
    3.11): wheels/ filled and the image built offline (it carries mini-swe-agent and Harbor),
    codex fetched into codex/ and mounted as its run block says, then the harness cache of every
    harness the answer ``cached_harnesses`` can pick and terminus-2's tmux filled and mounted as
    its block says; over the server's WebSocket the README's rollout call, with the scripted
    vLLM-like model (tests/support/_model.py), fixes hello-world with each of the nine
    harnesses: reward 1.0, and the answer's token ids are the ones the model sent, turn by
    turn."""
    from _model import Call, Edit, Say

    from harbor_openenv.harness.cached import KINDS

    port, name = free_port(), f"road-{uuid.uuid4().hex[:8]}-harness-env"
    picked = sorted(KINDS)
    answers = ("harness_rollouts=true", "terminus_rollouts=true", "base_image=python:3.13-slim")
    env = render(checkout, port, name, *answers, f"'cached_harnesses=[{','.join(picked)}]'")
    readme = (env / "README.md").read_text()
    assert '"harbor-openenv[server,harness,harbor]==' in (env / "pyproject.toml").read_text()
    offered = ["terminus-2", *picked]  # beside codex, in the rollout call's comment
    started = time.monotonic()
    output = shell(readme_block(readme, "build-offline"), cwd=env)
    assert "installed from wheels/ only" in output
    assert list((env / "wheels").glob("mini_swe_agent-*.whl"))
    built = time.monotonic() - started

    fetch, *run = readme_block(readme, "codex").splitlines()
    assert fetch.startswith("bash scripts/fetch-codex codex ")
    platform = CODEX_PLATFORMS[docker_client.info()["Architecture"]]
    shell(f"bash scripts/fetch-codex codex {CODEX_VERSION}", env, CODEX_PLATFORMS=platform)
    assert git("status", "--porcelain", cwd=env) == ""  # codex/ is git-ignored
    monkeypatch.setenv("HARBOR_OPENENV_ORCHESTRATION_TOKEN", TOKEN)
    hello = "printf 'Hello, world!\\n' > hello.txt"
    serve(env, port, name, "\n".join(run), readme, {
        "mini-swe-agent": [Call(hello), Call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")],
        "codex": [Call(hello), Say("I wrote hello.txt.")],
    }, offered)  # fmt: skip

    fill, *run = readme_block(readme, "harness-cache").splitlines()
    assert fill.startswith(
        f"uv run --with pip harbor-openenv harnesses fill harnesses {' '.join(picked)} tmux "
    )
    shell(fill, env)
    assert git("status", "--porcelain", cwd=env) == ""  # harnesses/ is git-ignored
    size = int(re.search(r"fill `harnesses/` once \(about (\d+) MB", readme)[1])
    filled = sum(f.stat().st_size for f in (env / "harnesses").rglob("*") if f.is_file()) / 1e6
    assert abs(filled - size) < 0.1 * size, (filled, size)  # the README's size, as filled
    try:
        scripts = {harness: [Call(f"cd /app && {hello}"), Say("Done.")] for harness in offered}
        scripts["aider"] = [Edit("hello.txt", "Hello, world!\n")]  # it edits files, runs nothing
        serve(env, port, name, "\n".join(run), readme, scripts, offered)
    finally:
        subprocess.run(["docker", "rmi", "-f", name], capture_output=True, check=False)
    total = time.monotonic() - started
    print(f"harness route: fill + offline build {built:.0f} s, all {total:.0f} s")


def serve(
    env: Path, port: int, name: str, run_block: str, readme: str, scripts: dict, picked: list[str]
) -> None:
    """The README's ``run_block`` (its token given, on the host's network as the README offers),
    then its rollout call with each harness of ``scripts``, whose model answers that script
    (``picked``: the harnesses the README offers beside codex)."""
    from _model import ScriptedModel

    run_block = run_block.replace("change-me", TOKEN)
    assert f"-p {port}:{port}" in run_block
    run_block = run_block.replace(f"-p {port}:{port}", "--network host")  # the documented option
    server = subprocess.Popen(
        ["bash", "-c", run_block], cwd=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert wait_healthy(f"http://127.0.0.1:{port}"), "the server did not come up"
        for harness, script in scripts.items():
            with ScriptedModel(script) as model:
                scope: dict = {}
                exec(rollout_snippet(readme, port, harness, model.base_url, picked), scope)
                sent = list(model.sent)
            result = scope["result"]
            captured = result.observation.info["rollout"]
            assert result.observation.error is None, (harness, result.observation.error)
            assert (result.reward, captured["harness"]) == (1.0, harness), captured
            # a side call (opencode's title) runs beside the first turn: compared in no order
            turns = sorted(
                (t["prompt_token_ids"], t["completion_token_ids"]) for t in captured["turns"]
            )
            assert turns == sorted((t["prompt_token_ids"], t["completion_token_ids"]) for t in sent)
            assert len(sent) >= (1 if harness == "aider" else 2), harness  # aider: one turn
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        remove_containers_of(name)


def test_the_dev_command_needs_no_engine_and_serves_the_docs(tmp_path):
    """README.md's development command, as written: ``bash scripts/dev`` in a fresh clone makes
    the locked ``.venv`` with no Docker engine reachable, and the docs command README.md gives
    after it, ``.venv/bin/mkdocs serve``, serves the site (on a free port instead of 8000)."""
    clone = tmp_path / "harbor-openenv"
    git("clone", "--quiet", "--no-hardlinks", str(REPO), str(clone), cwd=REPO)
    for name in ("scripts/dev", "README.md", "requirements/dev.txt"):  # this working tree's
        (clone / name).write_bytes((REPO / name).read_bytes())
    block = readme_block((REPO / "README.md").read_text(), "dev")
    assert block == "$ bash scripts/dev"
    environ = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    environ.pop("VIRTUAL_ENV", None)
    result = subprocess.run(
        ["bash", "-c", block[2:]], cwd=clone, env=environ, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert ".venv is ready" in result.stdout
    assert (
        "(`.venv/bin/mkdocs serve` to read it, after\n`bash scripts/dev`"
        in (REPO / "README.md").read_text()
    )
    port = free_port()
    server = subprocess.Popen(
        [str(clone / ".venv/bin/mkdocs"), "serve", "-a", f"127.0.0.1:{port}"],
        cwd=clone,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline, page = time.monotonic() + 180, None
        while time.monotonic() < deadline and page is None:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
            except httpx.HTTPError:
                time.sleep(1)
        assert page is not None and page.status_code == 200, "mkdocs serve did not answer"
        assert "harbor-openenv" in page.text
    finally:
        server.terminate()
        server.wait(timeout=30)
