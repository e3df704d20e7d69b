"""pass-to-pass: these pass before and after the fix."""

import unittest

from textkit import slugify, truncate


class Unchanged(unittest.TestCase):
    def test_simple_slug(self):
        self.assertEqual(slugify("abc"), "abc")
        self.assertEqual(slugify("a b"), "a-b")

    def test_truncate(self):
        self.assertEqual(truncate("hello", 10), "hello")
        self.assertEqual(truncate("hello world", 8), "hello...")
