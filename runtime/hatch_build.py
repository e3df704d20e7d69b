"""Build hook: compiles the in-container helper (every ``*.c`` of ``helper/``, see its
``main.c``) for every architecture the runtime serves, static and stripped, with Zig's C compiler
(the ``ziglang`` build requirement): one compiler run per architecture.

The binaries land beside the sources, under ``src/harbor_openenv/helper/``, so editable installs
find them too, and ship in the wheel as artifacts, with the sources (the runtime reads
``contract.h``). The wheel stays pure Python: the helper runs inside task containers, whose
architecture is the engine's, not the server's. A binary is rebuilt unless its stamp holds the
digest of every source of the folder (``*.c`` and ``*.h``, names and contents) and the flags.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ARCHITECTURES = ("x86_64", "aarch64")
FLAGS = ("-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror")


def sources_digest(folder: Path) -> str:
    """The sha256 of the helper's flags and of every source in ``folder``, names and contents."""
    digest = hashlib.sha256(" ".join(FLAGS).encode())
    for path in sorted(folder.glob("*.[ch]")):
        content = path.read_bytes()
        digest.update(f"\0{path.name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


class HelperBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        folder = Path(self.root) / "src" / "harbor_openenv" / "helper"
        sources = sorted(str(path) for path in folder.glob("*.c"))
        digest = sources_digest(folder)
        for arch in ARCHITECTURES:
            target = folder / f"harbor-openenv-helper-{arch}"
            stamp = target.with_name(target.name + ".sha256")  # the sources it was built from
            if target.is_file() and stamp.is_file() and stamp.read_text() == digest:
                continue
            subprocess.run(
                [sys.executable, "-m", "ziglang", "cc", "-target", f"{arch}-linux-musl"]
                + [*FLAGS, "-o", str(target), *sources],
                check=True,
            )
            stamp.write_text(digest)
