"""The reward contract, read the way Harbor 0.25's verifier reads it."""

from __future__ import annotations

import pytest

from harbor_openenv.tasks.reward import Failure, parse_reward


def test_reward_txt():
    reward = parse_reward({"reward.txt": b" 1\n"})
    assert (reward.value, reward.metrics, reward.error) == (1.0, {"reward": 1.0}, None)


def test_reward_json_wins_over_txt_and_keeps_every_key():
    reward = parse_reward(
        {"reward.json": b'{"reward": 0.5, "f2p": 1, "ok": true}', "reward.txt": b"0"}
    )
    assert reward.value == 0.5
    assert reward.metrics == {"reward": 0.5, "f2p": 1.0, "ok": 1.0}


def test_single_key_json_is_the_scalar():
    assert parse_reward({"reward.json": b'{"accuracy": 0.25}'}).value == 0.25


def test_details_are_forwarded():
    reward = parse_reward({"reward.txt": b"0", "reward-details.json": b'{"failing": ["a"]}'})
    assert reward.details == {"failing": ["a"]}


@pytest.mark.parametrize(
    ("files", "message", "failure"),
    [
        ({}, "wrote no reward", Failure.NO_REWARD),
        ({"reward.txt": b""}, "reward.txt is empty", Failure.EMPTY),
        ({"reward.json": b" \n"}, "reward.json is empty", Failure.EMPTY),
        ({"reward.txt": b"yes"}, "must hold one number", Failure.INVALID),
        ({"reward.txt": b"nan"}, "finite", Failure.INVALID),
        ({"reward.json": b"1"}, "flat object", Failure.INVALID),
        ({"reward.json": b"{}"}, "flat object", Failure.INVALID),
        ({"reward.json": b"{oops", "reward.txt": b"1"}, "not valid JSON", Failure.INVALID),
        ({"reward.json": b'{"reward": "1"}'}, "'reward' must be a finite number", Failure.INVALID),
        ({"reward.json": b'{"a": 1, "b": 0}'}, "no 'reward' key", Failure.INVALID),
        ({"reward-details.json": b"{}"}, "wrote no reward", Failure.NO_REWARD),
    ],
)
def test_missing_or_bad_reward_is_none_with_an_error_of_its_kind(files, message, failure):
    reward = parse_reward(files)
    assert reward.value is None
    assert message in reward.error
    assert reward.failure is failure


def test_a_reward_has_no_failure():
    assert parse_reward({"reward.txt": b"0"}).failure is None


def test_a_named_reward_key_or_mean_picks_the_scalar():
    files = {"reward.json": b'{"f2p": 1, "p2p": 0.5, "style": 0}'}
    default = parse_reward(files)
    assert default.value is None and "HARBOR_OPENENV_REWARD_KEY" in default.error
    assert len(default.metrics) == 3  # as before: every metric, no scalar, the error says why
    assert parse_reward(files, "f2p").value == 1.0
    picked = parse_reward(files, "mean:f2p,p2p")
    assert (picked.value, picked.error) == (0.75, None)
    assert picked.metrics == {"f2p": 1.0, "p2p": 0.5, "style": 0.0}  # every metric, unchanged
    # a key the metrics lack: the default rule, which finds none here
    missing = parse_reward(files, "mean:f2p,nope")
    assert missing.value is None and "'mean:f2p,nope'" in missing.error
    # tasks writing reward.txt, or a 'reward' key, keep working under a named key
    assert parse_reward({"reward.txt": b"1"}, "f2p").value == 1.0
    assert parse_reward({"reward.json": b'{"reward": 0, "x": 1}'}, "f2p").value == 0.0
    # the named key wins over a 'reward' key when the metrics hold it
    assert parse_reward({"reward.json": b'{"reward": 0, "f2p": 1}'}, "f2p").value == 1.0
