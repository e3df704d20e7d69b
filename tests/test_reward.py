"""The reward contract, read the way Harbor 0.25's verifier reads it."""

from __future__ import annotations

import pytest

from harbor_openenv.reward import parse_reward


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
    ("files", "message"),
    [
        ({}, "wrote no reward"),
        ({"reward.txt": b""}, "reward.txt is empty"),
        ({"reward.txt": b"yes"}, "must hold one number"),
        ({"reward.txt": b"nan"}, "finite"),
        ({"reward.json": b"1"}, "flat object"),
        ({"reward.json": b"{}"}, "flat object"),
        ({"reward.json": b"{oops", "reward.txt": b"1"}, "not valid JSON"),  # no fallback
        ({"reward.json": b'{"reward": "1"}'}, "'reward' must be a finite number"),
        ({"reward.json": b'{"a": 1, "b": 0}'}, "no 'reward' key"),
        ({"reward-details.json": b"{}"}, "wrote no reward"),
    ],
)
def test_missing_or_bad_reward_is_none_with_an_error(files, message):
    reward = parse_reward(files)
    assert reward.value is None
    assert message in reward.error
