"""resolve_within: the lexical half of confining agent paths to the working directory."""

from __future__ import annotations

import pytest

from harbor_openenv.sandbox import PathEscapeError, resolve_within


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a.txt", "/work/a.txt"),
        ("./sub/../b", "/work/b"),
        ("/work/c", "/work/c"),
        (".", "/work"),
        ("/work/", "/work"),
    ],
)
def test_inside(path, expected):
    assert resolve_within("/work", path) == expected


@pytest.mark.parametrize(
    "path", ["..", "../x", "/tests/test.sh", "/solution", "/workshop/x", "a/../../x", "", "a\0b"]
)
def test_outside_is_refused(path):
    with pytest.raises(PathEscapeError):
        resolve_within("/work", path)


def test_root_workdir_allows_everything_below_it():
    assert resolve_within("/", "etc/passwd") == "/etc/passwd"
