"""What one server keeps across its episodes: the warm pool, the disk guard, the metrics and the
session count."""
