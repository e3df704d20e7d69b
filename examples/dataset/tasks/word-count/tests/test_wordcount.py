"""unittest checks for /app/wordcount.py."""

import sys
import unittest

sys.path.insert(0, "/app")


class CountWords(unittest.TestCase):
    def test_example(self):
        from wordcount import count_words

        self.assertEqual(
            count_words("The cat and the hat."), {"the": 2, "cat": 1, "and": 1, "hat": 1}
        )

    def test_empty(self):
        from wordcount import count_words

        self.assertEqual(count_words(""), {})
        self.assertEqual(count_words("  \n\t "), {})

    def test_apostrophes_digits_and_punctuation(self):
        from wordcount import count_words

        self.assertEqual(
            count_words("Don't stop: don't! 42 x 42, DON'T"),
            {"don't": 3, "stop": 1, "42": 2, "x": 1},
        )


if __name__ == "__main__":
    unittest.main()
