"""The core imports without openenv; server names explain how to get the extra."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
    )


def test_core_does_not_import_openenv():
    result = run(
        """
        import sys
        import harbor_openenv, harbor_openenv.tasks.dataset, harbor_openenv.tasks.reward
        import harbor_openenv.datasets.manifest, harbor_openenv.tasks.task
        import harbor_openenv.tasks.config
        loaded = [m for m in sys.modules if m.split(".")[0] in {"openenv", "docker", "fastapi"}]
        assert not loaded, loaded
        print(harbor_openenv.__version__)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_server_names_without_the_extra_say_what_to_install():
    result = run(
        """
        import sys
        sys.modules["openenv"] = None  # as if openenv were not installed
        import harbor_openenv
        try:
            harbor_openenv.build_app
        except ImportError as exc:
            print(exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'harbor-openenv[server]'" in result.stdout


def test_unknown_attribute():
    result = run("import harbor_openenv; harbor_openenv.nope")
    assert "has no attribute 'nope'" in result.stderr


def test_server_and_client_skip_gradio_unless_the_web_ui_is_on(tmp_path):
    """OpenEnv's web UI is off by default, so the server and client never import gradio."""
    code = f"""
        import importlib.util, sys
        from harbor_openenv import HarborEnvClient, build_app
        app = build_app({str(tmp_path)!r})
        print(sorted(m for m in sys.modules if m.split(".")[0] == "gradio")[:3])
        assert importlib.util.find_spec("gradio") is not None  # not blocked: still importable
        """
    with ThreadPoolExecutor(2) as both:  # an import of gradio takes seconds: side by side
        off_run = both.submit(run, code)
        on_run = both.submit(run, code, ENABLE_WEB_INTERFACE="true")
        off, on = off_run.result(), on_run.result()
    assert off.returncode == 0, off.stderr
    assert off.stdout.strip() == "[]"
    assert on.returncode == 0, on.stderr
    assert "'gradio'" in on.stdout


# -- the layers: each subpackage imports only the ones below it --------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "runtime" / "src" / "harbor_openenv"
# Bottom to top; a module may import its own layer and the ones before it, never one after.
LAYERS = [
    {"_version", "errors", "_light", "_openenv", "models"},  # the error root, the protocol's names
    {"tasks"},  # the task format: pydantic only
    {"config", "events"},  # the server's settings and log lines
    {"datasets", "images", "helper", "sandbox"},
    {"harness"},  # agent harnesses: act through a sandbox, grade nothing
    {"backends"},  # where episodes run: one backend per mode, chosen at start-up
    {"serving"},  # what a server keeps across episodes: the warm pool, disk guard, metrics
    {"episode"},
    {"server"},
    {"client"},
    {"cli"},
]
LAYER_OF = {name: index for index, layer in enumerate(LAYERS) for name in layer}


def _imports(path: Path) -> set[str]:
    """The harbor_openenv subpackages or top-level modules ``path`` imports (relative included)."""
    tree = ast.parse(path.read_text())
    here = path.relative_to(PACKAGE).parts
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[: len(here) - node.level])
                parts = [*base, *(node.module.split(".") if node.module else [])]
                names = [parts[0]] if parts else [alias.name for alias in node.names]
            elif node.module and node.module.split(".")[0] == "harbor_openenv":
                parts = node.module.split(".")[1:]
                names = [parts[0]] if parts else [alias.name for alias in node.names]
            else:
                continue
            found.update(names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "harbor_openenv" and len(parts) > 1:
                    found.add(parts[1])
    return found


def test_the_subpackages_import_downward_only():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if top == "__init__":
            continue  # the package root names everything, lazily
        assert top in LAYER_OF, f"{top} has no layer in LAYERS"
        for name in _imports(path) - {top}:
            assert name in LAYER_OF, f"{path.relative_to(PACKAGE)} imports unknown {name}"
            if LAYER_OF[name] > LAYER_OF[top]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not upward, upward


def test_sandbox_base_needs_no_docker_and_tasks_need_only_pydantic():
    result = run(
        """
        import sys
        sys.modules["docker"] = None  # as if docker-py were not installed
        import harbor_openenv.sandbox.base, harbor_openenv.sandbox.memory
        import harbor_openenv.tasks.catalog, harbor_openenv.tasks.dataset
        import harbor_openenv.datasets.sources
        outside = {m.split(".")[0] for m in sys.modules} & {"openenv", "fastapi", "websockets"}
        assert not outside, outside
        """
    )
    assert result.returncode == 0, result.stderr


def test_client_extra_names_what_to_install():
    code = """
        import sys
        sys.modules["openenv"] = sys.modules["websockets"] = None
        import harbor_openenv
        print(harbor_openenv.HarborAction(command="ls").command)  # the models need pydantic only
        try:
            harbor_openenv.HarborEnvClient
        except ImportError as exc:
            print(exc)
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "ls"
    assert "pip install 'harbor-openenv[client]'" in result.stdout
