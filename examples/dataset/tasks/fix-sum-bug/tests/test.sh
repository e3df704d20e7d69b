#!/bin/bash
# Writes /logs/verifier/reward.json, a flat object of numbers: reward is 1.0 only when all checks pass.
# A zero reward is written first so that a crash in the checker still leaves a (failing) reward.
mkdir -p /logs/verifier
echo '{"reward": 0.0, "tests_passed": 0, "tests_total": 3, "pass_rate": 0.0}' > /logs/verifier/reward.json
cd /app || exit 0
python3 /tests/check_sum.py /logs/verifier/reward.json
exit 0
