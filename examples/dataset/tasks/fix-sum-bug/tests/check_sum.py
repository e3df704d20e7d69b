"""Check /app/sum_utils.py and write a flat numeric reward.json (argv[1])."""

import json
import sys
import traceback

CASES = [
    ("total([1, 2, 3])", lambda m: m.total([1, 2, 3]) == 6),
    ("total([5]) and total([])", lambda m: m.total([5]) == 5 and m.total([]) == 0),
    ("running_totals([4, 1, 2])", lambda m: m.running_totals([4, 1, 2]) == [4, 5, 7]),
]


def main(out_path: str) -> None:
    passed = 0
    try:
        sys.path.insert(0, "/app")
        import sum_utils
    except Exception:
        traceback.print_exc()
        sum_utils = None
    for name, check in CASES:
        ok = False
        if sum_utils is not None:
            try:
                ok = bool(check(sum_utils))
            except Exception:
                traceback.print_exc()
        print(("PASS " if ok else "FAIL ") + name)
        passed += ok
    total = len(CASES)
    reward = {
        "reward": 1.0 if passed == total else 0.0,
        "tests_passed": passed,
        "tests_total": total,
        "pass_rate": round(passed / total, 4),
    }
    with open(out_path, "w") as f:
        json.dump(reward, f)
    print(json.dumps(reward))


if __name__ == "__main__":
    main(sys.argv[1])
