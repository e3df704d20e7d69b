"""fail-to-pass: these fail before the fix and pass after it."""

import unittest

from textkit import slugify


class SlugifyCollapses(unittest.TestCase):
    def test_collapses_and_strips(self):
        self.assertEqual(slugify("  Hello,   World!  "), "hello-world")

    def test_only_separators(self):
        self.assertEqual(slugify("!!! ---"), "")

    def test_mixed(self):
        self.assertEqual(slugify("Rock & Roll -- 2024"), "rock-roll-2024")
