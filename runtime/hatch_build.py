"""Build hook: compiles the in-container helper (``helper/helper.c``) for every architecture the
runtime serves, static and stripped, with Zig's C compiler (the ``ziglang`` build requirement).

The binaries land beside the source, under ``src/harbor_openenv/helper/``, so editable installs
find them too, and ship in the wheel as artifacts. The wheel stays pure Python: the helper runs
inside task containers, whose architecture is the engine's, not the server's.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ARCHITECTURES = ("x86_64", "aarch64")


class HelperBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        folder = Path(self.root) / "src" / "harbor_openenv" / "helper"
        source = folder / "helper.c"
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        for arch in ARCHITECTURES:
            target = folder / f"harbor-openenv-helper-{arch}"
            stamp = target.with_name(target.name + ".sha256")  # the source it was built from
            if target.is_file() and stamp.is_file() and stamp.read_text() == digest:
                continue
            subprocess.run(
                [sys.executable, "-m", "ziglang", "cc", "-target", f"{arch}-linux-musl"]
                + [
                    "-static",
                    "-Os",
                    "-s",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-o",
                    str(target),
                    str(source),
                ],
                check=True,
            )
            stamp.write_text(digest)
