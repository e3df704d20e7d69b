"""Where tasks come from: dataset references, the byte-for-byte copy and its manifest, sync."""
