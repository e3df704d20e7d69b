"""The helper's contract with the runtime, read from the helper's own ``contract.h``.

Every exit code, limit, flag, magic and request word the helper (C, in this folder) and the
Python side share is one ``#define NAME VALUE`` line of ``contract.h``, which the package ships.
This module parses that file once, at import, and exposes each value under its C name; the
Python side uses these names and never repeats a value. A line it cannot read is an error, so
the header stays as plain as the comment at its top says.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Final

HEADER = "contract.h"
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_DEFINE = re.compile(r"#define (?P<name>[A-Z][A-Z0-9_]*) (?P<value>.+)")
_GUARD = re.compile(r"#(?:ifndef|define) HARBOR_OPENENV_CONTRACT_H|#endif")
_INTEGER = re.compile(r"(?P<n>\d+)u?")
_SHIFT = re.compile(r"\((?P<a>\d+)u? << (?P<b>\d+)\)")
_STRING = re.compile(r'"(?P<s>[^"\\]*)"')


class ContractError(Exception):
    """``contract.h`` holds a line this module cannot read, or lacks a name it needs."""


def parse(text: str) -> dict[str, int | str]:
    """The ``#define NAME VALUE`` lines of ``text`` (comments dropped), by name, in order."""
    defines: dict[str, int | str] = {}
    for number, line in enumerate(_COMMENT.sub("", text).splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        match = _DEFINE.fullmatch(line)
        if match is None:
            if _GUARD.fullmatch(line):
                continue
            raise ContractError(f"{HEADER} line {number}: not a #define NAME VALUE: {line!r}")
        name, value = match["name"], match["value"].strip()
        if name in defines:
            raise ContractError(f"{HEADER} line {number}: {name} defined twice")
        defines[name] = _value(value, f"{HEADER} line {number}")
    return defines


def _value(text: str, where: str) -> int | str:
    if match := _INTEGER.fullmatch(text):
        return int(match["n"])
    if match := _SHIFT.fullmatch(text):
        return int(match["a"]) << int(match["b"])
    if match := _STRING.fullmatch(text):
        return match["s"]
    raise ContractError(f"{where}: a value neither an integer, (A << B) nor a string: {text!r}")


def read() -> dict[str, int | str]:
    """The contract of the installed helper (its packaged ``contract.h``)."""
    return parse((resources.files(__package__) / HEADER).read_text(encoding="utf-8"))


DEFINES: Final = read()


def _int(name: str) -> int:
    value = DEFINES.get(name)
    if not isinstance(value, int):
        raise ContractError(f"{HEADER} has no integer {name}")
    return value


def _str(name: str) -> str:
    value = DEFINES.get(name)
    if not isinstance(value, str):
        raise ContractError(f"{HEADER} has no string {name}")
    return value


# where the helper lives in a task container
MOUNT_DIR: Final = _str("MOUNT_DIR")
HELPER_NAME: Final = _str("HELPER_NAME")
# subcommands
COMMAND_KEEP: Final = _str("COMMAND_KEEP")
COMMAND_IDLE: Final = _str("COMMAND_IDLE")
COMMAND_SERVE: Final = _str("COMMAND_SERVE")
COMMAND_RELAY: Final = _str("COMMAND_RELAY")
COMMAND_FILE: Final = _str("COMMAND_FILE")
FILE_READ: Final = _str("FILE_READ")
FILE_WRITE: Final = _str("FILE_WRITE")
FILE_LIST: Final = _str("FILE_LIST")
# exit codes
EXIT_USAGE: Final = _int("EXIT_USAGE")
FILE_FAILED: Final = _int("FILE_FAILED")
FILE_OUTSIDE: Final = _int("FILE_OUTSIDE")
FILE_MISSING: Final = _int("FILE_MISSING")
FILE_IS_FOLDER: Final = _int("FILE_IS_FOLDER")
FILE_NOT_REGULAR: Final = _int("FILE_NOT_REGULAR")
FILE_MESSAGE_ROOM: Final = _int("FILE_MESSAGE_ROOM")
# the keeper's requests
REQUEST_MARK: Final = _str("REQUEST_MARK")
REQUEST_PARK: Final = _str("REQUEST_PARK")
REQUEST_STOP: Final = _str("REQUEST_STOP")
REQUEST_CHANGES: Final = _str("REQUEST_CHANGES")
PREPARE_STAGE: Final = _str("PREPARE_STAGE")
PREPARE_KEEP: Final = _str("PREPARE_KEEP")
ANSWER_OK: Final = _str("ANSWER_OK")
ANSWER_ERR: Final = _str("ANSWER_ERR")
KEEP_ENTRYPOINT_EXITED: Final = _int("KEEP_ENTRYPOINT_EXITED")
KEEP_STOP_FAILED: Final = _int("KEEP_STOP_FAILED")
KEEP_PREPARE_FAILED: Final = _int("KEEP_PREPARE_FAILED")
KEEP_CHANGES_FAILED: Final = _int("KEEP_CHANGES_FAILED")
KEEP_BAD_REQUEST: Final = _int("KEEP_BAD_REQUEST")
STOP_SECONDS: Final = _int("STOP_SECONDS")
ENTRYPOINT_WAIT_MS: Final = _int("ENTRYPOINT_WAIT_MS")
CHANGES_MAX_BYTES: Final = _int("CHANGES_MAX_BYTES")
CHANGES_ADDED_DIR: Final = _str("CHANGES_ADDED_DIR")
CHANGE_ADDED: Final = _str("CHANGE_ADDED")
CHANGE_CHANGED: Final = _str("CHANGE_CHANGED")
# the exec channel
MAX_REQUEST: Final = _int("MAX_REQUEST")
MAX_OUTPUT: Final = _int("MAX_OUTPUT")
MAX_STRINGS: Final = _int("MAX_STRINGS")
REQUEST_HEAD: Final = _int("REQUEST_HEAD")
ANSWER_HEAD: Final = _int("ANSWER_HEAD")
ANSWER_MAGIC: Final = _str("ANSWER_MAGIC")
ANSWER_TIMED_OUT: Final = _int("ANSWER_TIMED_OUT")
ANSWER_TRUNCATED: Final = _int("ANSWER_TRUNCATED")
ANSWER_EXITED: Final = _int("ANSWER_EXITED")
EXIT_GRACE_MS: Final = _int("EXIT_GRACE_MS")
# the relay
RELAY_HEAD: Final = _int("RELAY_HEAD")
RELAY_READY: Final = _int("RELAY_READY")
RELAY_OPEN: Final = _int("RELAY_OPEN")
RELAY_DATA: Final = _int("RELAY_DATA")
RELAY_CLOSE: Final = _int("RELAY_CLOSE")
RELAY_ACK: Final = _int("RELAY_ACK")
RELAY_CHUNK: Final = _int("RELAY_CHUNK")
RELAY_WINDOW: Final = _int("RELAY_WINDOW")
RELAY_CONNECTIONS: Final = _int("RELAY_CONNECTIONS")
RELAY_LISTEN_FAILED: Final = _int("RELAY_LISTEN_FAILED")
