"""URL slugs."""

import re


def slugify(text: str) -> str:
    """Lower-case text and join its runs of letters and digits with single dashes."""
    return re.sub(r"[^a-z0-9]", "-", text.lower())


def truncate(text: str, width: int, marker: str = "...") -> str:
    """Cut text to at most width characters, ending with marker when something was cut."""
    if len(text) <= width:
        return text
    return text[: max(width - len(marker), 0)] + marker
