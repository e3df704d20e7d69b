"""The verifier against the sandbox interface, on a fake sandbox (no Docker)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest
from _fake_sandbox import FakeSandbox

from harbor_openenv.episode.verifier import Verifier, tail_of
from harbor_openenv.sandbox import ExecResult, Sandbox, TooLargeError
from harbor_openenv.tasks.dataset import Dataset

TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


def verifier(max_reward_bytes: int = 1024, env: dict[str, str] | None = None) -> Verifier:
    return Verifier(Dataset(TASKS)["edit-file"], None, env or {}, max_reward_bytes)


def test_verify_stops_the_agent_stages_the_tests_and_reads_the_reward():
    sandbox = FakeSandbox()
    sandbox.solved = True
    verdict = verifier(env={"KEY": "v"}).verify(cast(Sandbox, sandbox))
    assert (verdict.value, verdict.metrics, verdict.error) == (1.0, {"reward": 1.0}, None)
    assert verdict.stdout == "graded 1" and not verdict.timed_out
    assert sandbox.called("stop_processes") == [("", "/logs/verifier", "/tests", "stage")]
    assert sandbox.called("put_dir") == [(TASKS / "edit-file" / "tests", "/tests")]
    command, user, env = sandbox.called("exec")[0]
    assert command == "(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1"
    assert user is None and env == {"KEY": "v"}


def test_bundled_tests_are_kept_not_staged():
    sandbox = FakeSandbox()
    verifier().verify(cast(Sandbox, sandbox), bundled=True)
    assert sandbox.called("stop_processes") == [("", "/logs/verifier", "/tests", "keep")]
    assert sandbox.called("put_dir") == []


def test_a_timed_out_verifier_has_no_reward_whatever_its_files_say():
    sandbox = FakeSandbox()
    sandbox.files["/logs/verifier/reward.txt"] = b"1"
    sandbox.answers["/tests/test.sh"] = ExecResult(None, "", timed_out=True)
    verdict = verifier().verify(cast(Sandbox, sandbox))
    assert verdict.timed_out and verdict.value is None and verdict.metrics is None
    assert verdict.error == "the verifier timed out after 60 s ([verifier].timeout_sec)"


def test_a_missing_reward_is_an_error():
    sandbox = FakeSandbox()
    sandbox.answers["/tests/test.sh"] = ExecResult(0, "")
    verdict = verifier().verify(cast(Sandbox, sandbox))
    assert verdict.value is None and "wrote no reward" in (verdict.error or "")


def test_an_oversized_reward_file_names_its_setting():
    sandbox = FakeSandbox()
    sandbox.answers["/tests/test.sh"] = ExecResult(0, "")
    sandbox.files["/logs/verifier/reward.txt"] = b"1" * 2000
    with pytest.raises(TooLargeError, match="HARBOR_OPENENV_MAX_REWARD_BYTES"):
        verifier().verify(cast(Sandbox, sandbox))


def test_oversized_reward_details_are_reported_not_read():
    sandbox = FakeSandbox()
    sandbox.solved = True
    sandbox.files["/logs/verifier/reward-details.json"] = json.dumps({"x": "y" * 2000}).encode()
    verdict = verifier().verify(cast(Sandbox, sandbox))
    assert verdict.value == 1.0
    assert "over the limit of 1024" in json.dumps(verdict.reward.details)


def test_tail_of_an_absent_log_is_empty():
    sandbox = FakeSandbox()
    assert tail_of(cast(Sandbox, sandbox), "/logs/agent/none.txt") == ""
    sandbox.files["/log"] = b"x" * 10000
    assert len(tail_of(cast(Sandbox, sandbox), "/log")) == 8192
