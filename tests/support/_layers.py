"""The test layers: each folder's conftest.py marks every test under it with the folder's name."""

from __future__ import annotations

from pathlib import Path

import pytest


def mark_layer(items: list[pytest.Item], conftest: str) -> list[pytest.Item]:
    """Mark the items under ``conftest``'s folder with that folder's name; those items.

    A conftest's ``pytest_collection_modifyitems`` sees every item of the session, not only its
    folder's, hence the filter."""
    folder = Path(conftest).parent
    mine = [item for item in items if item.path.is_relative_to(folder)]
    for item in mine:
        item.add_marker(getattr(pytest.mark, folder.name))
    return mine
