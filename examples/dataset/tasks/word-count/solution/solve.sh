#!/bin/bash
cat > /app/wordcount.py <<'PY'
"""Word frequencies."""

import re
from collections import Counter


def count_words(text):
    """Return a dict mapping each lower-cased word of text to its number of occurrences."""
    return dict(Counter(re.findall(r"[a-z0-9']+", text.lower())))
PY
