"""The helper's contract (helper/contract.h) is the one place its exit codes, limits, flags and
request words are written: contract.py reads every line of it, the Python modules that speak to
the helper hold no copy of a value, and the C compiler sees the same values (no engine)."""

from __future__ import annotations

import ast
import io
import re
import shutil
import subprocess
import tokenize
from pathlib import Path

import pytest

from harbor_openenv import helper
from harbor_openenv.helper import contract
from harbor_openenv.sandbox import base, channel, relay
from harbor_openenv.sandbox.command import Command

PACKAGE = Path(helper.__file__).parent.parent
HELPER = PACKAGE / "helper"
HEADER = HELPER / "contract.h"
# Every module that runs the helper or reads its answers.
SPEAKERS = [
    PACKAGE / "helper/__init__.py",
    PACKAGE / "sandbox/files.py",
    PACKAGE / "sandbox/channel.py",
    PACKAGE / "sandbox/relay.py",
    PACKAGE / "sandbox/base.py",
    PACKAGE / "sandbox/docker.py",
    PACKAGE / "episode/verifier.py",
    PACKAGE / "episode/episode.py",
]
GUARD = "HARBOR_OPENENV_CONTRACT_H"


def header_names() -> list[str]:
    """The names contract.h defines, found without contract.py's parser."""
    names = re.findall(r"^#define (\w+)", HEADER.read_text(), re.M)
    return [name for name in names if name != GUARD]


def test_every_define_is_parsed_and_exported():
    names = header_names()
    assert names == list(contract.DEFINES)
    assert len(names) == len(set(names))
    for name, value in contract.DEFINES.items():
        assert getattr(contract, name) == value, name
        assert type(getattr(contract, name)) is type(value), name


def test_the_values_parse_as_c_reads_them():
    assert contract.MAX_REQUEST == 80 << 20
    assert contract.MAX_OUTPUT == 64 << 20
    assert contract.ANSWER_MAGIC == "HOE1"
    assert contract.KEEP_STOP_FAILED == 97


@pytest.mark.parametrize(
    "text",
    [
        "#define SIZE (1 + 2)",
        "#define NAME other",
        "#include <stdio.h>",
        "#define ONE 1\n#define ONE 1",
        "#define FLAG",
        "int x;",
    ],
)
def test_the_parser_refuses_what_it_cannot_read(text):
    with pytest.raises(contract.ContractError):
        contract.parse(text)


def test_the_parser_drops_comments_and_the_guard():
    text = f"/* a\n * comment */\n#ifndef {GUARD}\n#define {GUARD}\n#define A 7u /* x */\n#endif\n"
    assert contract.parse(text) == {"A": 7}


def literals(path: Path) -> list[tuple[int, object]]:
    """The line and value of every number, string and bytes literal of a Python module."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type in (tokenize.NUMBER, tokenize.STRING):
            try:
                found.append((token.start[0], ast.literal_eval(token.string)))
            except ValueError:  # an f-string's parts
                continue
    return found


def test_the_python_side_holds_no_copy_of_a_value():
    strings = {value for value in contract.DEFINES.values() if isinstance(value, str)}
    # small numbers (up to 24: exit codes, flags, the stop's seconds, head sizes) are everywhere
    # in Python (1 << 20); their uses as exit codes and flags are looked for below
    numbers = {value for value in contract.DEFINES.values() if isinstance(value, int)}
    numbers = {value for value in numbers if value > 24}
    copies = []
    for path in SPEAKERS:
        for line, value in literals(path):
            if isinstance(value, bytes):
                value = value.decode("latin-1")
            if (isinstance(value, str) and value in strings) or (
                isinstance(value, int) and value in numbers
            ):
                copies.append(f"{path.name}:{line}: {value!r}")
        source = path.read_text()
        for pattern in (
            r"exit_code\s*[!=]=\s*[1-9]",  # an exit code compared with a number
            r"code\s*==\s*[\"']\d",  # ... or with its text
            r"^\s*\d+\s*:",  # a dict keyed by numbers (exit codes)
            r"flags\s*&\s*\d",  # an answer's flags
            r"_(?:TIMED_OUT|TRUNCATED|EXITED)\b.*=\s*\d",  # ... named
            r"MAX_(?:REQUEST|OUTPUT)\s*=\s*\d",  # the channel's limits
            r"\b(?:2|20) s\b",  # the helper's waits, in a comment
        ):
            for match in re.finditer(pattern, source, re.M):
                line = source.count("\n", 0, match.start()) + 1
                copies.append(f"{path.name}:{line}: {match.group().strip()!r}")
    assert not copies, "\n".join(copies)


def test_the_python_framing_matches_the_contract():
    frame = channel.request(Command(["x"], timeout_s=1, max_output=0), nonce=bytes(8))
    assert len(frame) == 4 + contract.REQUEST_HEAD + (4 + 0) + (4 + 1)
    assert channel._ANSWER.size == contract.ANSWER_HEAD
    assert relay._HEAD.size == contract.RELAY_HEAD
    assert channel.GRACE_S * 1000 > contract.EXIT_GRACE_MS
    assert base._KEEPER_TIMEOUT_S > contract.STOP_SECONDS
    assert f"{contract.MOUNT_DIR}/{contract.HELPER_NAME}" == helper.HELPER


def test_every_name_is_used_by_the_helper_or_the_runtime():
    c_code = "".join(path.read_text() for path in sorted(HELPER.glob("*.c")))
    python = "".join(path.read_text() for path in SPEAKERS)
    unused = [
        name
        for name in contract.DEFINES
        if not re.search(rf"\b{name}\b", c_code) and f"contract.{name}" not in python
    ]
    assert not unused


def test_the_c_files_hold_no_copy_of_a_value():
    strings = {value for value in contract.DEFINES.values() if isinstance(value, str)}
    copies = []
    for path in sorted(HELPER.glob("*.[ch]")):
        if path == HEADER:
            continue
        text = path.read_text()
        assert text.startswith("/*"), f"{path.name} opens without its comment"
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        if path.suffix == ".c":
            first = re.search(r"^#include .*$", text, re.M)
            assert first and first.group() == '#include "common.h"', path.name
        for value in strings:
            if f'"{value}"' in text:
                copies.append(f"{path.name}: {value!r}")
        copies += [f"{path.name}: {m}" for m in re.findall(r"\b9[678];|'H', 'O'", text)]
    assert not copies, copies


def test_the_c_compiler_reads_the_same_values(tmp_path):
    """A tiny program built with the host's C compiler prints every value as C sees it."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler on this host (the helper's build checks the header too)")
    lines = []
    for name, value in contract.DEFINES.items():
        if isinstance(value, str):
            lines.append(f'    printf("%s=%s\\n", "{name}", {name});')
        else:
            lines.append(f'    printf("%s=%llu\\n", "{name}", (unsigned long long)({name}));')
    program = tmp_path / "values.c"
    program.write_text(
        '#include <stdio.h>\n#include "contract.h"\nint main(void) {\n'
        + "\n".join(lines)
        + "\n    return 0;\n}\n"
    )
    binary = tmp_path / "values"
    subprocess.run(
        [compiler, "-Wall", "-Wextra", "-Werror", "-I", str(HELPER), "-o", str(binary), program],
        check=True,
    )
    printed = subprocess.run([binary], capture_output=True, text=True, check=True).stdout
    seen = dict(line.split("=", 1) for line in printed.splitlines())
    assert seen == {name: str(value) for name, value in contract.DEFINES.items()}
