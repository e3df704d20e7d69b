"""The helper volume's archives: one per content, shared by servers, in a private folder."""

from __future__ import annotations

import os

import pytest

from harbor_openenv.harness import archives
from harbor_openenv.harness.base import HarnessError

pytestmark = pytest.mark.unit


@pytest.fixture
def temporary(tmp_path, monkeypatch):
    monkeypatch.setattr(archives.tempfile, "gettempdir", lambda: str(tmp_path))
    return tmp_path


def test_an_archive_is_made_once_per_content_and_leaves_no_partial(temporary):
    made = []

    def write(path):
        made.append(path)
        path.write_bytes(b"tar")

    first = archives.shared("x", ["a 1 2"], write)
    again = archives.shared("x", ["a 1 2"], write)  # another server: the same file, not remade
    other = archives.shared("x", ["a 1 3"], write)  # a changed file: another archive
    assert first == again != other and len(made) == 2
    assert sorted(p.name for p in first.parent.iterdir()) == sorted([first.name, other.name])
    assert first.parent.stat().st_mode & 0o777 == 0o700


def test_a_failed_write_leaves_nothing(temporary):
    def write(path):
        path.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        archives.shared("x", ["a"], write)
    assert list(archives.folder().iterdir()) == []


def test_a_folder_others_can_write_is_refused(temporary):
    place = temporary / f"harbor-openenv-archives-{os.getuid()}"
    place.mkdir(mode=0o777)
    place.chmod(0o777)
    with pytest.raises(HarnessError, match="not a private folder"):
        archives.folder()


def test_a_symbolic_link_is_refused(temporary):
    (temporary / "elsewhere").mkdir(mode=0o700)
    (temporary / f"harbor-openenv-archives-{os.getuid()}").symlink_to(temporary / "elsewhere")
    with pytest.raises(HarnessError, match="not a private folder"):
        archives.folder()
