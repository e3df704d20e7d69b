"""Small text helpers."""

from textkit.slug import slugify, truncate

__all__ = ["slugify", "truncate"]
