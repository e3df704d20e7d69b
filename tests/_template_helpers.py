"""Helpers for tests/test_template.py: datasets on disk, tree digests, the copier CLI."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COPIER = Path(sys.executable).with_name("copier")
RUNTIME_VERSION = re.search(
    r'__version__ = "([^"]+)"', (REPO / "runtime/src/harbor_openenv/_version.py").read_text()
).group(1)

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


def make_fake_wheel(out_dir: Path) -> Path:
    """A small valid wheel of the runtime's name and version (fallback when build cannot run)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"harbor_openenv-{RUNTIME_VERSION}"
    wheel = out_dir / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("harbor_openenv/__init__.py", "")
        zf.writestr(
            f"{name}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: harbor-openenv\nVersion: {RUNTIME_VERSION}\n",
        )
        zf.writestr(
            f"{name}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{name}.dist-info/RECORD", "")
    return wheel


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
