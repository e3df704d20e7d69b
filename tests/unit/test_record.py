"""Recorded rollouts (harbor_openenv.episode.record): the trial folders and their bounds, recorded
through the Recorder API (no Docker). Harbor reading them is tests/deploy/test_record_harbor.py."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
from _records import NO_REWARD, ROLLOUT_TURNS, record_episodes, record_rollout, recorder
from _server import wait_until

from harbor_openenv.config import Settings
from harbor_openenv.episode import record
from harbor_openenv.episode.record import (
    MAX_EPISODE_CHARS,
    MAX_LONG_TEXT_CHARS,
    MAX_TEXT_CHARS,
    Recorder,
)
from harbor_openenv.tasks.reward import Failure


def files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def load(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


# -- the layout --------------------------------------------------------------------------------


def test_off_by_default() -> None:
    assert Settings().record_dir is None
    assert Recorder.from_settings(Settings()) is None
    env = {"HARBOR_OPENENV_RECORD_DIR": "/srv/rollouts"}
    assert Settings.from_env(env).record_dir == Path("/srv/rollouts")


def test_one_job_folder_per_run_and_one_trial_folder_per_episode(tmp_path) -> None:
    rec = recorder(tmp_path)
    trials = record_episodes(rec)
    rec.close()
    again = recorder(tmp_path)  # a second server run in the same second: its own job folder
    again.close()
    jobs = sorted(p.name for p in (tmp_path / "rollouts").iterdir())
    assert len(jobs) == 2 and jobs[1].startswith(jobs[0])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d__\d\d-\d\d-\d\d", jobs[0])
    job = rec.job_dir
    assert {p.name for p in job.iterdir()} == {"config.json", "result.json"} | {
        t.name for t in trials.values()
    }
    assert re.fullmatch(r"hello-world__[0-9a-f]{8}", trials["single"].name)
    assert files(trials["single"]) == {
        "config.json",
        "result.json",
        "agent/trajectory.json",
        "verifier/test-stdout.txt",
        "verifier/reward.json",
    }
    assert files(trials["multi"]) == {
        "config.json",
        "result.json",
        "steps/create/agent/trajectory.json",
        "steps/create/verifier/test-stdout.txt",
        "steps/create/verifier/reward.json",
        "steps/fill/agent/trajectory.json",
        "steps/fill/verifier/test-stdout.txt",
        "steps/fill/verifier/reward.json",
    }
    assert files(trials["none"]) == {
        "config.json",
        "result.json",
        "exception.txt",
        "agent/trajectory.json",
        "verifier/test-stdout.txt",
    }
    job_result = load(job / "result.json")
    assert job_result["n_total_trials"] == 3 and job_result["finished_at"]
    stats = job_result["stats"]
    assert (stats["n_completed_trials"], stats["n_errored_trials"]) == (3, 1)
    # Harbor's Mean: several reward keys, each averaged over every trial (missing: 0)
    assert stats["evals"]["openenv-client__adhoc"]["metrics"] == [
        {"lines": 0.5 / 3, "reward": (1.0 + 0.75) / 3}
    ]


def test_what_each_trial_holds(tmp_path) -> None:
    rec = recorder(tmp_path)
    trials = record_episodes(rec)
    rec.close()
    single = load(trials["single"] / "result.json")
    assert single["task_name"] == "hello-world"
    assert single["verifier_result"] == {"rewards": {"reward": 1.0}}
    assert "exception_info" not in single and single["finished_at"]
    assert single["agent_result"]["metadata"] == {"episode_id": "episode-1", "actions": 2}
    verifier = trials["single"] / "verifier"
    assert (verifier / "test-stdout.txt").read_text() == "test_hello PASSED\n1 passed"
    assert load(verifier / "reward.json") == {"reward": 1.0}
    trajectory = load(trials["single"] / "agent" / "trajectory.json")
    assert trajectory["session_id"] == "episode-1"
    steps = trajectory["steps"]
    assert [s["source"] for s in steps] == ["user", "agent", "agent"]  # evaluate is no action
    assert steps[0]["message"] == "Write hello.txt saying Hello, world!"
    call = steps[2]["tool_calls"][0]
    assert call["function_name"] == "write"
    assert call["arguments"] == {"path": "hello.txt", "content": "Hello, world!\n"}
    assert steps[1]["observation"]["results"][0]["content"] == "total 0\n"
    assert steps[1]["observation"]["results"][0]["extra"] == {"exit_code": 0}

    multi = load(trials["multi"] / "result.json")
    assert multi["verifier_result"] == {"rewards": {"reward": 0.75, "lines": 0.5}}
    assert [s["step_name"] for s in multi["step_results"]] == ["create", "fill"]
    assert multi["step_results"][1]["verifier_result"] == {"rewards": {"reward": 0.5, "lines": 1.0}}
    second = load(trials["multi"] / "steps" / "fill" / "agent" / "trajectory.json")["steps"]
    assert second[0] == {
        "step_id": 1,
        "timestamp": second[0]["timestamp"],
        "source": "user",
        "message": "Step two: fill a.txt",
    }
    assert [s["tool_calls"][0]["function_name"] for s in second[1:]] == ["exec", "read"]

    none = load(trials["none"] / "result.json")
    assert none["verifier_result"] is None
    assert none["exception_info"]["exception_type"] == "RewardFileNotFoundError"
    assert none["exception_info"]["exception_message"] == NO_REWARD
    assert (trials["none"] / "exception.txt").read_text() == NO_REWARD
    assert (trials["none"] / "verifier" / "test-stdout.txt").read_text().startswith("test.sh")


def test_a_rollout_is_recorded_with_its_token_data(tmp_path) -> None:
    rec = recorder(tmp_path)
    trial = record_rollout(rec)
    rec.close()
    trajectory = json.loads((trial / "agent" / "trajectory.json").read_text())
    assert trajectory["agent"] == {
        "name": "mini-swe-agent",
        "version": "unknown",
        "model_name": "scripted-model",
    }
    user, *agent = trajectory["steps"]
    assert user["source"] == "user" and [s["source"] for s in agent] == ["agent", "agent"]
    assert agent[0]["tool_calls"] == [
        {"tool_call_id": "call_1", "function_name": "bash", "arguments": {"command": "ls"}}
    ]
    for step, turn in zip(agent, ROLLOUT_TURNS, strict=True):
        metrics = step["metrics"]
        assert metrics["prompt_token_ids"] == turn["prompt_token_ids"]
        assert metrics["completion_token_ids"] == turn["completion_token_ids"]
        assert metrics["logprobs"] == turn["logprobs"]
        assert metrics["extra"]["parent_id"] == turn["parent_id"]
    assert trajectory["final_metrics"]["total_prompt_tokens"] == 13
    assert trajectory["final_metrics"]["total_completion_tokens"] == 5
    result = json.loads((trial / "result.json").read_text())
    assert result["agent_info"]["name"] == "mini-swe-agent"
    context = result["agent_result"]
    assert (context["n_input_tokens"], context["n_output_tokens"]) == (13, 5)
    (detail,) = context["rollout_details"]
    assert detail["completion_token_ids"] == [[5, 6, 7], [10, 11]]
    assert result["verifier_result"] == {"rewards": {"reward": 1.0}}


def test_a_rollout_past_the_budget_keeps_its_turns_without_tokens(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(record, "MAX_EPISODE_CHARS", 600)
    rec = recorder(tmp_path)
    trial = record_rollout(rec)
    rec.close()
    trajectory = json.loads((trial / "agent" / "trajectory.json").read_text())
    assert "token ids are not stored" in trajectory["notes"]
    assert all("prompt_token_ids" not in s.get("metrics", {}) for s in trajectory["steps"])
    result = json.loads((trial / "result.json").read_text())
    assert "rollout_details" not in result["agent_result"]


def test_the_orchestration_token_is_never_stored(tmp_path) -> None:
    rec = recorder(tmp_path)
    ep = rec.start("t", None, "e")
    ep.step(
        {"action_type": "solve", "token": "s3cret-token", "metadata": {"token": "s3cret-token"}},
        {"output": "solved", "exit_code": 0},
    )
    ep.finish()
    rec.close()
    for path in rec.job_dir.rglob("*"):
        if path.is_file():
            assert "s3cret" not in path.read_text(), path


def test_evaluate_before_or_after_verified_opens_the_next_step(tmp_path) -> None:
    rec = recorder(tmp_path)
    ep = rec.start("t", "first", "e")
    ep.step({"action_type": "exec", "command": "a"}, {"output": ""})
    ep.step({"action_type": "evaluate"}, {"instruction": "second", "done": False})  # first
    ep.verified("one", 1.0, {"reward": 1.0}, "", None)
    ep.step({"action_type": "exec", "command": "b"}, {"output": ""})
    ep.verified("two", 0.0, {"reward": 0.0}, "", None)
    ep.step({"action_type": "exec", "command": "c"}, {"output": ""})  # after the last verifier
    ep.finish()
    rec.close()
    result = load(ep.trial_dir / "result.json")
    # no verified(None): Harbor's default strategy, the mean of the steps
    assert result["verifier_result"] == {"rewards": {"reward": 0.5}}
    one = load(ep.trial_dir / "steps/one/agent/trajectory.json")
    two = load(ep.trial_dir / "steps/two/agent/trajectory.json")
    assert [s["message"] for s in one["steps"]] == ["first", "exec a"]
    assert [s["message"] for s in two["steps"]] == ["second", "exec b", "exec c"]
    assert "after this step's verifier ran" in two["notes"]


def test_unsafe_names_stay_inside_the_job_folder(tmp_path) -> None:
    rec = recorder(tmp_path)
    ep = rec.start("../../../etc/passwd", None, "../../e")
    ep.verified("../../escape", 1.0, {"reward": 1.0}, "", None)
    ep.verified("..", 1.0, {"reward": 1.0}, "", None)
    ep.finish()
    rec.close()
    assert ep.trial_dir.parent == rec.job_dir
    assert re.fullmatch(r"passwd__[0-9a-f]{8}", ep.trial_dir.name)
    inside = {p.resolve() for p in tmp_path.rglob("*")}
    assert all(rec.job_dir.resolve() in p.parents for p in inside if p.is_file())
    assert {p.name for p in (ep.trial_dir / "steps").iterdir()} == {"escape", "step-2"}


def test_an_unfinished_episode_shows_as_running_and_late_calls_do_nothing(tmp_path) -> None:
    rec = recorder(tmp_path)
    running = rec.start("t", None, "e1")
    done = rec.start("t", None, "e2")
    done.finish()
    done.finish()
    done.step({"action_type": "exec", "command": "late"}, {"output": "late"})
    rec.flush()
    assert files(running.trial_dir) == {"config.json"}
    before = (done.trial_dir / "result.json").read_text()
    done.verified(None, 1.0, {"reward": 1.0}, "late", None)
    rec.close()
    assert (done.trial_dir / "result.json").read_text() == before
    stats = load(rec.job_dir / "result.json")["stats"]
    assert (stats["n_completed_trials"], stats["n_running_trials"]) == (1, 1)


# -- bounds ------------------------------------------------------------------------------------


def test_each_output_is_cut_to_its_cap_keeping_head_and_tail(tmp_path) -> None:
    rec = recorder(tmp_path)
    big = "H" * 100_000 + "T" * 100_000
    ep = rec.start("t", "I" * 200_000, "e")
    ep.step({"action_type": "write", "path": "f", "content": big}, {"output": big, "error": big})
    ep.verified(None, None, {f"m{i}": 1.0 for i in range(1000)}, big, big)
    ep.finish()
    rec.close()
    steps = load(ep.trial_dir / "agent" / "trajectory.json")["steps"]
    assert MAX_LONG_TEXT_CHARS <= len(steps[0]["message"]) < MAX_LONG_TEXT_CHARS + 100
    content = steps[1]["tool_calls"][0]["arguments"]["content"]
    output = steps[1]["observation"]["results"][0]["content"]
    for text in (content, output, steps[1]["observation"]["results"][0]["extra"]["error"]):
        assert MAX_TEXT_CHARS <= len(text) < MAX_TEXT_CHARS + 100
        assert text.startswith("H" * 1000) and text.endswith("T" * 1000)
        assert "characters cut: the record keeps 16384 of each output" in text
    stdout = (ep.trial_dir / "verifier" / "test-stdout.txt").read_text()
    assert MAX_LONG_TEXT_CHARS <= len(stdout) < MAX_LONG_TEXT_CHARS + 100
    result = load(ep.trial_dir / "result.json")
    assert len(result["verifier_result"]["rewards"]) == record.MAX_METRICS
    assert len(result["exception_info"]["exception_message"]) < MAX_TEXT_CHARS + 100


def test_an_episode_record_stops_growing_at_its_budget(tmp_path) -> None:
    rec = recorder(tmp_path)
    ep = rec.start("t", None, "e")
    chunk = "x" * MAX_TEXT_CHARS
    actions = 2 * MAX_EPISODE_CHARS // (2 * MAX_TEXT_CHARS)
    for i in range(actions):
        ep.step({"action_type": "exec", "command": f"{i} {chunk}"}, {"output": chunk})
    ep.verified(None, 1.0, {"reward": 1.0}, chunk, None)
    ep.finish()
    rec.close()
    path = ep.trial_dir / "agent" / "trajectory.json"
    trajectory = load(path)
    stored = len(trajectory["steps"])
    assert 0 < stored < actions
    assert (
        f"{actions - stored} of the episode's {actions} actions are not stored"
        in (trajectory["notes"])
    )
    assert path.stat().st_size < MAX_EPISODE_CHARS * 1.1
    assert "record is full" in (ep.trial_dir / "verifier" / "test-stdout.txt").read_text()


def test_a_folder_it_cannot_write_is_a_clear_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"HARBOR_OPENENV_RECORD_DIR=.*cannot write a job folder"):
        Recorder.from_settings(Settings(record_dir=blocker / "rollouts"))


def test_a_failed_write_is_logged_never_raised(tmp_path, caplog) -> None:
    rec = recorder(tmp_path)
    shutil.rmtree(rec.record_dir)
    (tmp_path / "rollouts").write_text("not a folder any more")
    with caplog.at_level(logging.WARNING, logger="harbor_openenv"):
        ep = rec.start("t", None, "e")
        ep.step({"action_type": "exec", "command": "ls"}, {"output": ""})
        ep.finish()
        rec.close()
    assert "record-error" in caplog.text


def test_recording_work_leaves_the_step(tmp_path) -> None:
    """step() keeps a bounded record in memory; files are written only by the writer thread."""
    rec = recorder(tmp_path)
    ep = rec.start("t", None, "e")
    rec.flush()
    written = files(rec.job_dir)
    for _ in range(50):
        ep.step({"action_type": "exec", "command": "ls"}, {"output": "a\n" * 1000})
    ep.verified(None, 1.0, {"reward": 1.0}, "ok", None)
    assert files(rec.job_dir) == written  # nothing written on the caller's thread
    ep.finish()
    assert wait_until(lambda: (ep.trial_dir / "result.json").exists())
    rec.close()


# -- Harbor reads them -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "harbor"),
    [
        (Failure.NO_REWARD, "RewardFileNotFoundError"),
        (Failure.EMPTY, "RewardFileEmptyError"),
        (Failure.INVALID, "VerifierOutputParseError"),
        (Failure.TIMEOUT, "VerifierTimeoutError"),
        (Failure.EPISODE, "EpisodeError"),
        (None, "EpisodeError"),
    ],
)
def test_an_error_is_typed_by_its_kind_never_by_its_message(tmp_path, failure, harbor) -> None:
    """The message names every other kind's words: only the kind decides Harbor's type."""
    rec = recorder(tmp_path)
    ep = rec.start("typed", "Do it", "episode-typed")
    misleading = "timed out; wrote no reward; no verifier result; reward.txt is empty"
    ep.verified("one", None, {}, "", misleading, failure)
    ep.verified(None, None, {}, "", misleading, failure)
    ep.finish()
    rec.close()
    result = json.loads((ep.trial_dir / "result.json").read_text())
    assert result["exception_info"]["exception_type"] == harbor
    assert result["step_results"][0]["exception_info"]["exception_type"] == harbor
    assert result["exception_info"]["exception_message"] == misleading
