#!/bin/bash
# Repo2RLEnv-style verifier: reward.txt is 1 only when every fail-to-pass test passes and no
# pass-to-pass test regresses; reward-details.json carries the breakdown. A failing reward is
# written first, so a crash of the runner still leaves a reward.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
echo '{"resolved": false}' > /logs/verifier/reward-details.json
cd /workspace || exit 0
python3 /tests/run_tests.py
exit 0
