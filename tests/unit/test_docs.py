"""The documentation: the mkdocs site builds with --strict (no broken link, no page left out of the
nav), its generated references hold every setting and command, and README.md stays a short front
page whose links all lead somewhere. No engine needed."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mkdocs.exceptions import PluginError

from harbor_openenv.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _text(html_file: Path) -> str:
    return re.sub(r"<[^>]+>", "", html_file.read_text(encoding="utf-8"))


def test_the_settings_reference_is_every_setting(site):
    text = _text(site / "reference" / "settings" / "index.html")
    for variable in Settings.variables():
        assert variable in text, variable


def test_the_cli_reference_is_every_command(site):
    text = _text(site / "reference" / "cli" / "index.html")
    for command in _hooks()._commands():
        assert f"usage: harbor-openenv {command}" in text, command


def test_the_hand_written_tables_are_checked_against_the_code():
    hooks = _hooks()
    page = (DOCS / "reference" / "settings.md").read_text()
    hooks.check_settings_details(page)
    dropped = re.sub(r"\n\| `HARBOR_OPENENV_POOL_SIZE` \|[^\n]*", "", page)
    with pytest.raises(PluginError, match="not described: HARBOR_OPENENV_POOL_SIZE"):
        hooks.check_settings_details(dropped)
    added = page.replace("| `HARBOR_OPENENV_TASKS` |", "| `HARBOR_OPENENV_NOPE` |")
    with pytest.raises(PluginError, match="not read by Settings: HARBOR_OPENENV_NOPE"):
        hooks.check_settings_details(added)
    cli = (DOCS / "reference" / "cli.md").read_text()
    hooks.check_cli_table(cli)
    with pytest.raises(PluginError, match="unknown"):
        hooks.check_cli_table(cli.replace("`harbor-openenv wheels", "`harbor-openenv wheelz"))


def test_the_architecture_page_names_every_layer():
    source = next(ROOT.glob("tests/**/test_imports.py")).read_text()
    layers = next(
        ast.literal_eval(node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in node.targets)
    )
    rows = [
        line
        for line in (DOCS / "design" / "architecture.md").read_text().splitlines()
        if re.match(r"\| \d+ \|", line)
    ]
    assert len(rows) == len(layers)
    for index, (row, layer) in enumerate(zip(rows, layers, strict=True), start=1):
        named = set(re.findall(r"`(\w+)`", row.split("|")[2]))
        assert row.startswith(f"| {index} |") and named == set(layer), (row, layer)


def test_readme_is_short_and_its_links_lead_to_pages_that_exist():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 160
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = {link for link in links if "://" not in link}
    missing = sorted(link for link in local if not (ROOT / link).exists())
    assert not missing, missing
    pages = {p.relative_to(ROOT).as_posix() for p in DOCS.rglob("*.md")}
    assert not pages - local, f"pages README.md does not link: {sorted(pages - local)}"


def test_readme_keeps_the_commands_ci_and_the_road_read():
    text = README.read_text(encoding="utf-8")
    for name in ("render", "test"):
        assert f"<!-- harbor-openenv:road:{name} -->\n```console\n$ " in text, name
    # .ci/run's sed: the first line of README.md that is `$ bash scripts/test...`
    assert re.search(r"^\$ bash scripts/test.*$", text, re.MULTILINE)


def test_the_model_server_example_passes_the_capture_proxys_probe():
    """The trainer guide's model endpoint contract, run: its example server, started as the guide
    says, is graded trainable (``tokens``, processed logprobs) by the capture proxy's own probe."""
    from openenv.core.harness.capture.validate_llm import validate_llm

    from harbor_openenv.client.launch import free_port

    guide = (DOCS / "guides" / "trainer.md").read_text()
    command = "$ python docs/examples/model_server.py 8001"
    assert command in guide and 'base_url="http://127.0.0.1:8001/v1", model="my-model"' in guide
    assert len((DOCS / "examples" / "model_server.py").read_text().splitlines()) <= 55
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "docs/examples/model_server.py", str(port)],
        cwd=DOCS.parent,
        stderr=subprocess.DEVNULL,
    )
    try:
        report = None
        for _ in range(50):
            report = validate_llm(f"http://127.0.0.1:{port}/v1", "my-model", timeout=10)
            if report.reachable:
                break
            time.sleep(0.2)
        assert report is not None and report.ok, report and report.summary()
        assert (report.capture_level, report.logprobs_mode) == ("tokens", "processed")
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_tls_files_have_one_name_everywhere():
    """The engine's certificate is ``server.pem`` (and ``server-key.pem``) in the guide, the
    rendered README and the tests' engines alike; a client's are ``ca.pem``, ``cert.pem``,
    ``key.pem``."""
    texts = {
        path: (ROOT / path).read_text()
        for path in (
            "docs/guides/remote-engines.md",
            "template/README.md.jinja",
            "tests/support/_engines.py",
        )
    }
    for path, text in texts.items():
        assert "server-cert.pem" not in text, path
        assert "server.pem" in text and "server-key.pem" in text, path
