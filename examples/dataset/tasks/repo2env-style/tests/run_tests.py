"""Run the fail-to-pass and pass-to-pass suites; write reward.txt and reward-details.json."""

import json
import sys
import unittest

LOGS = "/logs/verifier"


def run(module: str) -> tuple[int, int]:
    suite = unittest.defaultTestLoader.loadTestsFromName(module)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    failed = len(result.failures) + len(result.errors)
    return result.testsRun - failed, result.testsRun


def main() -> None:
    sys.path[:0] = ["/workspace", "/tests"]
    details: dict = {"resolved": False}
    try:
        f2p_passed, f2p_total = run("test_f2p")
        p2p_passed, p2p_total = run("test_p2p")
    except Exception as exc:  # an import error in the agent's code is a failure, not a crash
        details["error"] = repr(exc)
        f2p_passed = f2p_total = p2p_passed = p2p_total = 0
    resolved = f2p_total > 0 and f2p_passed == f2p_total and p2p_passed == p2p_total
    details.update(
        resolved=resolved,
        f2p={"passed": f2p_passed, "total": f2p_total},
        p2p={"passed": p2p_passed, "total": p2p_total},
    )
    with open(f"{LOGS}/reward-details.json", "w") as f:
        json.dump(details, f)
    with open(f"{LOGS}/reward.txt", "w") as f:
        f.write("1\n" if resolved else "0\n")
    print(json.dumps(details))


if __name__ == "__main__":
    main()
