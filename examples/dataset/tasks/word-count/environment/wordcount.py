"""Word frequencies."""


def count_words(text):
    """Return a dict mapping each lower-cased word of text to its number of occurrences."""
    raise NotImplementedError("count_words is not implemented yet")
