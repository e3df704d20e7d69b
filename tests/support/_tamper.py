"""Planting a tampering route in a hostile test's episode: the shell line that plants a file, the
two agents each route is tried by (root, and an unprivileged one), the move played in one
episode, and the suspect paths a tamper report names."""

from __future__ import annotations

from typing import Any

from harbor_openenv.episode.tamper import SUSPECT

# The agents' task names and the tail of task.toml that makes each.
AGENTS = {"root": "", "nobody": '\n[agent]\nuser = "nobody"\n'}


def plant(path: str, text: str, mode: str = ">") -> str:
    """A shell line writing ``text`` (and a newline) to ``path`` (``>>``: appending)."""
    quoted = "'" + text.replace("'", "'\\''") + "'"
    return f"printf '%s\\n' {quoted} {mode} {path}"


def play(server: Any, user: str, script: str, *, exits: bool = False) -> tuple[int, Any]:
    """One episode of the ``user`` agent's task on ``server``: a wrong answer (0.0 untampered),
    ``script`` run (``exits``: it must succeed), then evaluate; the script's exit code and the
    evaluate's result."""
    with server.client() as env:
        env.reset(task_id=user)
        env.write("answer.txt", "41")
        code = env.exec(script).observation.exit_code
        assert code == 0 or not exits, (script, code)
        return code, env.evaluate()


def named(report: dict[str, Any], *, deleted: bool = False) -> list[str]:
    """The paths a tamper report names in a suspect class (``deleted``: deleted ones)."""
    paths = report["deleted"]["paths"] if deleted else report["paths"]
    return [path for kind in SUSPECT for path in paths.get(kind, [])]
