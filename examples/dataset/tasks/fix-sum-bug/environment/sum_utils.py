"""Small numeric helpers."""


def total(numbers):
    """Return the sum of numbers (0 for an empty list)."""
    result = 0
    for i in range(1, len(numbers)):
        result += numbers[i]
    return result


def running_totals(numbers):
    """Return the prefix sums of numbers: [a, a+b, a+b+c, ...]."""
    return [total(numbers[: i + 1]) for i in range(len(numbers))]
