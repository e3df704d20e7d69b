"""The core imports without openenv; server names explain how to get the extra."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


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
        import harbor_openenv, harbor_openenv.dataset, harbor_openenv.reward
        import harbor_openenv.manifest, harbor_openenv.task, harbor_openenv.task_config
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
        import sys
        from harbor_openenv import HarborEnvClient, build_app
        app = build_app({str(tmp_path)!r})
        print(sorted(m for m in sys.modules if m.split(".")[0] == "gradio")[:3])
        import gradio  # still importable afterwards
        """
    off = run(code)
    assert off.returncode == 0, off.stderr
    assert off.stdout.strip() == "[]"
    on = run(code, ENABLE_WEB_INTERFACE="true")
    assert on.returncode == 0, on.stderr
    assert "'gradio'" in on.stdout
