"""The hostile agent's process tricks (fixtures/hostile/attack.c) and a look at what runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

ATTACK_SOURCE = Path(__file__).parents[1] / "fixtures" / "hostile" / "attack.c"
# Every process of the sandbox but PID 1 and the listing shell (builtins only: it forks nothing).
_LIST = (
    'for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = 1 ] || [ "$p" = "$$" ] || echo "$p"; done'
)


def build_attack(folder: Path) -> bytes:
    """The attack program, static (it runs in any image), built on the host with gcc."""
    binary = folder / "attack"
    subprocess.run(["gcc", "-static", "-O2", "-pthread", "-o", binary, ATTACK_SOURCE], check=True)
    return binary.read_bytes()


def processes(box) -> list[str]:
    """The pids of every process in ``box`` but PID 1 (listed as root through the engine)."""
    listed = box.exec_root(_LIST)
    assert listed.exit_code == 0, listed.output
    return listed.output.split()


def mark(box) -> list[str]:
    """Mark ``box``'s baseline; the pids it holds, as :func:`processes` lists them."""
    return [str(pid) for pid in box.mark_baseline()]
