"""mkdocs hooks: the references generated from the code each time the site is built.

``<!-- generated:settings -->`` in a page becomes the table of every ``HARBOR_OPENENV_*`` variable
``harbor_openenv.config.Settings`` reads (its default and its field's doc), and
``<!-- generated:cli -->`` the help of every ``harbor-openenv`` command, from the argparse parser
of ``harbor_openenv.cli.main``. So neither can drift from the code. The hand-written tables beside
them are checked against the same code: the build fails (``mkdocs build --strict`` or not) when
the settings page's "In detail" table or the CLI page's command table leaves a variable or a
command out, or names one the code does not have.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

from harbor_openenv.cli.main import build_parser
from harbor_openenv.config import Settings

SETTINGS_MARK = "<!-- generated:settings -->"
CLI_MARK = "<!-- generated:cli -->"
HELP_COLUMNS = 100  # the width argparse wraps the help to, whatever terminal builds the site


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`1` (on)" if value else "`0` (off)"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, tuple):
        return f"`{','.join(value)}`" if value else "unset"
    if isinstance(value, Path):
        value = str(value)
    return f"`{value}`"


def settings_table() -> str:
    """Every setting: its variable, its default, its doc (``_about``'s one line)."""
    rows = ["| variable | default | setting |", "| --- | --- | --- |"]
    for field in dataclasses.fields(Settings):
        doc = field.metadata["doc"].replace("|", "\\|")
        rows.append(f"| `{Settings.variable(field.name)}` | {_default(field.default)} | {doc} |")
    return "\n".join(rows)


def _table_after(markdown: str, heading: str, first_header: str) -> list[str]:
    """The first cells of the table below ``heading`` whose header starts ``first_header``."""
    lines = markdown.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    if not table[0].startswith(first_header):
        raise PluginError(f"the table under {heading!r} starts {table[0]!r}")
    return [row.split("|")[1] for row in table[2:]]  # after the header and its --- line


def check_settings_details(markdown: str) -> None:
    """The "In detail" table names exactly the variables Settings reads, each once."""
    listed: list[str] = []
    for cell in _table_after(markdown, "## In detail", "| variable |"):
        listed += re.findall(r"`(HARBOR_OPENENV_\w+)`", cell)
    known = set(Settings.variables())
    problems = []
    if len(listed) != len(set(listed)):
        problems.append("a variable listed twice")
    if missing := sorted(known - set(listed)):
        problems.append(f"not described: {', '.join(missing)}")
    if unknown := sorted(set(listed) - known):
        problems.append(f"not read by Settings: {', '.join(unknown)}")
    if problems:
        raise PluginError("reference/settings.md's 'In detail' table: " + "; ".join(problems))


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise PluginError("harbor-openenv's parser has no commands")


def check_cli_table(markdown: str) -> None:
    """The command table names exactly the parser's commands."""
    listed = set()
    for cell in _table_after(markdown, "# Command line", "| command |"):
        found = re.match(r"\s*`harbor-openenv ([a-z-]+)", cell)
        if not found:
            raise PluginError(f"reference/cli.md: a command row without a command: {cell!r}")
        listed.add(found.group(1))
    commands = set(_commands())
    if listed != commands:
        raise PluginError(
            "reference/cli.md's command table: "
            f"missing {sorted(commands - listed)}, unknown {sorted(listed - commands)}"
        )


def cli_reference() -> str:
    """``harbor-openenv --help`` and each command's, as argparse prints them."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    try:
        parts = ["```text", build_parser().format_help().rstrip(), "```"]
        for name, command in _commands().items():
            parts += ["", f"### harbor-openenv {name}", "", "```text"]
            parts += [command.format_help().rstrip(), "```"]
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if SETTINGS_MARK in markdown:
        check_settings_details(markdown)
        markdown = markdown.replace(SETTINGS_MARK, settings_table())
    if CLI_MARK in markdown:
        check_cli_table(markdown)
        markdown = markdown.replace(CLI_MARK, cli_reference())
    return markdown
