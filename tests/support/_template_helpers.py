"""Helpers for the template tests: datasets on disk, tree digests, the copier CLI, tagged clones."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COPIER = Path(sys.executable).with_name("copier")
VENV_BIN = REPO / ".venv" / "bin"
RUNTIME_VERSION = re.search(
    r'__version__ = "([^"]+)"', (REPO / "runtime/src/harbor_openenv/_version.py").read_text()
).group(1)

OLD, NEW = "v0.1.0", "v999.0.0"  # the oldest supported release; a fake version above all

DOCKERFILE = "FROM python:3.12-slim\nWORKDIR /app\n"
TEST_SH = b"#!/bin/bash\nmkdir -p /logs/verifier\necho 0 > /logs/verifier/reward.txt\n"


def tree_digest(root: Path) -> dict[str, tuple]:
    """{relative path: (kind, sha256 or link target, permission bits)} for everything under root."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = ("file", digest, stat.S_IMODE(st.st_mode))
    return out


def write_task(path: Path, toml: bytes | str = "[verifier]\ntimeout_sec = 60.0\n") -> Path:
    """A minimal runnable Harbor task."""
    (path / "environment").mkdir(parents=True)
    (path / "tests").mkdir()
    data = toml.encode() if isinstance(toml, str) else toml
    (path / "task.toml").write_bytes(data)
    (path / "instruction.md").write_text("Do the thing.\n")
    (path / "environment" / "Dockerfile").write_text(DOCKERFILE)
    script = path / "tests" / "test.sh"
    script.write_bytes(TEST_SH)
    script.chmod(0o755)
    return path


def make_weird_dataset(root: Path) -> Path:
    """Dataset (tasks under tasks/) with CRLF, binary, exec bits, Jinja-looking text, nesting."""
    tasks = root / "tasks"
    alpha = write_task(
        tasks / "alpha", b'version = "1.0"\r\n\r\n[verifier]\r\ntimeout_sec = 60.0\r\n'
    )
    (alpha / "environment" / "blob.bin").write_bytes(bytes(range(256)) * 40 + b"\x00\r\n\xff")
    (alpha / "environment" / "foo.jinja").write_text("{{ x }} {% if y %}z{% endif %}\n")
    (alpha / "environment" / "notes.txt").write_bytes(b"{{ x }}\r\nno newline at end")
    (alpha / "environment" / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (alpha / "environment" / "run.sh").chmod(0o750)
    (alpha / "environment" / "same.txt").symlink_to("notes.txt")
    (alpha / "environment" / "empty-dir").mkdir()
    write_task(tasks / "group" / "nested" / "beta")
    (tasks / "group" / "README.md").write_text("a folder of tasks\n")
    gamma = tasks / "gamma"
    (gamma / "solution").mkdir(parents=True)
    (gamma / "task.toml").write_text('version = "1.0"\n\n[agent]\ntimeout_sec = 1800.0\n')
    (gamma / "instruction.md").write_text("Reply with a patch.\n")
    (gamma / "solution" / "patch.diff").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    return root


def run_copier(
    dst: Path,
    *data: str,
    cwd: Path | None = None,
    quiet: bool = False,
    ref: str = "HEAD",
    src: Path = REPO,
) -> subprocess.CompletedProcess:
    """`copier copy --trust --defaults --vcs-ref REF -d ... SRC DST`, output captured."""
    cmd = [str(COPIER), "copy", "--trust", "--defaults", "--vcs-ref", ref]
    if quiet:
        cmd.append("--quiet")
    for item in data:
        cmd += ["-d", item]
    cmd += [str(src), str(dst)]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def commit_all(repo: Path, message: str, *, allow_empty: bool = False) -> None:
    git("add", "-A", cwd=repo)
    identity = ("-c", "user.name=t", "-c", "user.email=t@example.invalid")
    empty = ("--allow-empty",) if allow_empty else ()
    git(*identity, "commit", "-qm", message, *empty, cwd=repo)


def tagged_template_clone(clone: Path) -> Path:
    """A clone of this template at ``clone``: the release OLD tagged, the working tree as NEW.

    OLD is tagged on its "Release" commit when the clone has no tags; NEW is a fake high version
    on a commit of the working tree (uncommitted changes included), so that version-gated
    migrations run (an update to an untagged HEAD runs none).
    """
    git("clone", "--quiet", "--no-hardlinks", str(REPO), str(clone), cwd=REPO)
    if OLD not in git("tag", "--list", cwd=clone).split():
        release = git("log", "--format=%H", "-1", "--grep", f"^Release {OLD}$", cwd=clone)
        assert release, f"the history holds no 'Release {OLD}' commit"
        git("tag", OLD, release, cwd=clone)
    # The working tree as it is, uncommitted changes included.
    git("rm", "-rq", ".", cwd=clone)
    files = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO)
    for name in filter(None, files.split("\0")):
        source = REPO / name
        if source.is_file():
            target = clone / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    commit_all(clone, "the working tree", allow_empty=True)  # a clean checkout changes nothing
    git("tag", NEW, cwd=clone)
    return clone


def release_series(clone: Path, versions: list[str]) -> Path:
    """A clone of this template whose working tree is released as each of ``versions`` in turn.

    Each release is what CONTRIBUTING.md's "Releasing" makes: ``__version__`` set to X.Y.Z, a commit
    "Release vX.Y.Z" and the tag vX.Y.Z; here the releases differ only in their version.
    """
    tagged_template_clone(clone)
    version_file = clone / "runtime" / "src" / "harbor_openenv" / "_version.py"
    text = version_file.read_text()
    for version in versions:
        version_file.write_text(
            re.sub(r'__version__ = "[^"]+"', f'__version__ = "{version}"', text)
        )
        commit_all(clone, f"Release v{version}")
        git("tag", f"v{version}", cwd=clone)
    return clone


def fake_package_index(root: Path, versions: list[str]) -> dict[str, str]:
    """A local package index (PEP 503 layout, file:// URL) on which harbor-openenv ``versions``
    are published (metadata-only wheels), and the environment that points the pin check at it
    (HARBOR_OPENENV_PIN_INDEX_URL: uv's own index settings stay, for its builds); git's HTTP
    goes to a closed port, so a git pin to an example URL is "could not be checked" offline and
    online alike. What the pin check (harbor_openenv.cli.pins) sees in these tests."""
    import zipfile

    project = root / "harbor-openenv"
    project.mkdir(parents=True, exist_ok=True)
    links = []
    for version in versions:
        name = f"harbor_openenv-{version}-py3-none-any.whl"
        info = f"harbor_openenv-{version}.dist-info"
        with zipfile.ZipFile(project / name, "w") as wheel:
            wheel.writestr(
                f"{info}/METADATA",
                f"Metadata-Version: 2.1\nName: harbor-openenv\nVersion: {version}\n",
            )
            wheel.writestr(
                f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            )
            wheel.writestr(
                f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n"
            )
        links.append(f'<a href="{name}">{name}</a>')
    (project / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>\n")
    return {
        "HARBOR_OPENENV_PIN_INDEX_URL": root.resolve().as_uri(),
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.proxy",
        "GIT_CONFIG_VALUE_0": "http://127.0.0.1:9",
    }


def readme_block(text: str, name: str) -> str:
    """The fenced block right after ``<!-- harbor-openenv:road:NAME -->``."""
    found = re.search(
        rf"<!-- harbor-openenv:road:{re.escape(name)} -->\n```[a-z]*\n(.*?)\n```", text, re.DOTALL
    )
    assert found, f"no block marked harbor-openenv:road:{name}"
    return found.group(1)


def shell(script: str, cwd: Path, timeout: float = 900, **env: str) -> str:
    """Run ``script`` with bash as a user's shell would (this venv first on PATH); its output."""
    environ = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", **env}
    environ.pop("VIRTUAL_ENV", None)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"$ {script}\n{output[-4000:]}"
    return output
