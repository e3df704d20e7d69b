"""Every module of the runtime stays under 450 lines: one that grows past it is split along a seam
into small modules named after what they hold (docs/design/architecture.md lists them)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "runtime" / "src" / "harbor_openenv"
LIMIT = 450
ALLOWED: dict[str, str] = {}  # a module's path under the package: why it may be longer


def test_the_runtimes_modules_are_at_most_450_lines():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50  # the package was found
    lengths = {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text().splitlines()) for path in modules
    }
    over = {name: n for name, n in lengths.items() if n > LIMIT and name not in ALLOWED}
    assert not over, f"over {LIMIT} lines (split each along a seam): {over}"
    stale = [name for name in ALLOWED if lengths.get(name, 0) <= LIMIT]
    assert not stale, f"allowed to be long but no longer are: {stale}"
