"""Recorded rollouts (harbor_openenv.episode.record): the trial folders, their bounds, and
Harbor reading
them: Harbor 0.25's own models load every file (in Harbor's venv), and `harbor view` shows each
episode and its reward in headless Chromium.

The last two need what .ci/interop-tools.sh installs (Harbor's venv, Debian's chromium); missing
tools fail them, nothing skips. No Docker: episodes are recorded through the Recorder API.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import httpx
import pytest
from conftest import FIXTURE_TASKS, Server, wait_until
from test_interop import CHROMIUM_ARGS

from harbor_openenv.client.launch import free_port, stop_process
from harbor_openenv.config import Settings
from harbor_openenv.episode import record
from harbor_openenv.episode.record import (
    MAX_EPISODE_CHARS,
    MAX_LONG_TEXT_CHARS,
    MAX_TEXT_CHARS,
    Recorder,
)

HARBOR_VENV = Path(
    os.environ.get("HARBOR_OPENENV_HARBOR_VENV")
    or Path.home() / ".cache" / "harbor-openenv" / "harbor-venv"
)
NO_REWARD = (
    "the verifier wrote no reward: neither /logs/verifier/reward.json nor"
    " /logs/verifier/reward.txt exists"
)


def recorder(tmp_path: Path) -> Recorder:
    found = Recorder.from_settings(Settings(record_dir=tmp_path / "rollouts"))
    assert found is not None
    return found


def record_episodes(rec: Recorder) -> dict[str, Path]:
    """Three episodes: single-step rewarded, multi-step with two verified steps, no reward."""
    one = rec.start("hello-world", "Write hello.txt saying Hello, world!", "episode-1")
    one.step(
        {"action_type": "exec", "command": "ls -la", "token": None, "metadata": {}},
        {"output": "total 0\n", "exit_code": 0},
    )
    one.step(
        {"action_type": "write", "path": "hello.txt", "content": "Hello, world!\n"},
        {"output": "", "exit_code": None},
    )
    one.step(
        {"action_type": "evaluate", "token": "s3cret-token"},
        {"output": "1 passed", "reward": 1.0, "done": True},
    )
    one.verified(None, 1.0, {"reward": 1.0}, "test_hello PASSED\n1 passed", None)
    one.finish()

    two = rec.start("two-steps", "Step one: create a.txt", "episode-2")
    two.step({"action_type": "exec", "command": "touch a.txt"}, {"output": "", "exit_code": 0})
    two.verified("create", 1.0, {"reward": 1.0}, "a.txt exists", None)
    # the evaluate's observation arrives after verified(): it opens the second step
    two.step(
        {"action_type": "evaluate", "token": "s3cret-token"},
        {"output": "a.txt exists", "instruction": "Step two: fill a.txt", "done": False},
    )
    two.step(
        {"action_type": "exec", "command": "echo half > a.txt"}, {"output": "", "exit_code": 0}
    )
    two.step({"action_type": "read", "path": "a.txt"}, {"output": "half\n", "exit_code": None})
    two.verified("fill", 0.5, {"reward": 0.5, "lines": 1.0}, "a.txt is half full", None)
    two.verified(None, 0.75, {"reward": 0.75, "lines": 0.5}, "", None)
    two.finish()

    three = rec.start("broken-verifier", "Do anything", "episode-3")
    three.step(
        {"action_type": "exec", "command": "false"}, {"output": "", "exit_code": 1, "error": None}
    )
    three.verified(None, None, {}, "test.sh: line 3: oops\n", NO_REWARD)
    three.finish()
    rec.flush()
    return {"single": one.trial_dir, "multi": two.trial_dir, "none": three.trial_dir}


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

HARBOR_LOADS = """
import json, sys
from pathlib import Path
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult
from harbor.models.trajectories.trajectory import Trajectory
from harbor.viewer.scanner import JobScanner

def same(model, path):
    # every field we wrote is one of Harbor's, with the value Harbor reads back
    ours = json.loads(path.read_text())
    loaded = model.model_validate(ours)
    back = json.loads(loaded.model_dump_json(exclude_unset=True))
    assert back == ours, (str(path), ours, back)
    return loaded

job = Path(sys.argv[1])
checked = []
same(JobConfig, job / "config.json")
same(JobResult, job / "result.json")
scanner = JobScanner(job.parent)
for trial in sorted(p for p in job.iterdir() if p.is_dir()):
    same(TrialConfig, trial / "config.json")
    result = same(TrialResult, trial / "result.json")
    assert scanner.get_trial_result(job.name, trial.name) is not None
    for path in sorted(trial.rglob("trajectory.json")):
        same(Trajectory, path)
        checked.append(str(path.relative_to(job)))
    rewards = result.verifier_result.rewards if result.verifier_result else None
    error = result.exception_info and result.exception_info.exception_type
    checked.append([trial.name, rewards, error])
print(json.dumps(checked))
"""


def test_harbors_own_models_load_every_file(tmp_path) -> None:
    rec = recorder(tmp_path)
    trials = record_episodes(rec)
    rec.close()
    harbor = subprocess.run(
        [str(HARBOR_VENV / "bin" / "python"), "-W", "ignore", "-c", HARBOR_LOADS, str(rec.job_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert harbor.returncode == 0, harbor.stderr
    checked = json.loads(harbor.stdout)
    assert [trials["none"].name, None, "RewardFileNotFoundError"] in checked
    assert [trials["multi"].name, {"reward": 0.75, "lines": 0.5}, None] in checked
    assert f"{trials['multi'].name}/steps/fill/agent/trajectory.json" in checked


def page_text(chromium: str, url: str, profile: Path, screenshot: Path | None = None) -> str:
    """The page as headless Chromium renders it (the viewer is a JS app: virtual time lets its
    API calls finish), as text; with ``screenshot``, also a PNG of it."""
    args = [chromium, *CHROMIUM_ARGS, f"--user-data-dir={profile}", "--window-size=1400,1000"]
    args.append("--virtual-time-budget=20000")
    dom = subprocess.run(
        [*args, "--dump-dom", url], capture_output=True, text=True, timeout=180, check=True
    ).stdout
    if screenshot is not None:
        subprocess.run(
            [*args, f"--screenshot={screenshot}", url], capture_output=True, timeout=180, check=True
        )
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", dom)))


@pytest.mark.timeout(600)
def test_harbor_view_shows_each_episode_and_its_reward(tmp_path) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: run .ci/interop-tools.sh"
    rec = recorder(tmp_path)
    trials = record_episodes(rec)
    rec.close()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "harbor-view.log").open("w")  # a file: a full pipe would stall the server
    view = subprocess.Popen(
        [str(HARBOR_VENV / "bin" / "harbor"), "view", str(rec.record_dir), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def up() -> bool:
            try:
                return httpx.get(f"{url}/api/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        assert wait_until(up, timeout=60), (tmp_path / "harbor-view.log").read_text()
        job = rec.job_dir.name
        # the API the page reads: the job list, the job's trials, each trial
        jobs = httpx.get(f"{url}/api/jobs").json()["items"]
        assert [(j["name"], j["n_total_trials"], j["n_errored_trials"]) for j in jobs] == [
            (job, 3, 1)
        ]
        listed = httpx.get(f"{url}/api/jobs/{job}/trials").json()["items"]
        rewards = {t["name"]: (t["reward"], t["error_type"]) for t in listed}
        assert rewards == {
            trials["single"].name: (1.0, None),
            trials["multi"].name: (0.75, None),
            trials["none"].name: (None, "RewardFileNotFoundError"),
        }
        multi = f"{url}/api/jobs/{job}/trials/{trials['multi'].name}"
        steps = httpx.get(multi).json()["step_results"]
        assert [s["verifier_result"]["rewards"]["reward"] for s in steps] == [1.0, 0.5]
        trajectory = httpx.get(f"{multi}/trajectory", params={"step": "fill"}).json()
        assert trajectory["steps"][0]["message"] == "Step two: fill a.txt"
        output = httpx.get(f"{multi}/verifier-output", params={"step": "fill"}).json()
        assert output["stdout"] == "a.txt is half full"

        # the page: the job's rollouts, one row per episode with its reward or its error
        screenshot = tmp_path / "harbor-view-rollouts.png"
        text = page_text(
            chromium, f"{url}/jobs/{job}?tab=results", tmp_path / "profile", screenshot
        )
        for name, shown in (
            (trials["single"].name, "1.00"),
            (trials["multi"].name, "0.75"),
            (trials["none"].name, "RewardFileNotFoundError"),
        ):
            assert re.search(rf"{re.escape(name)} openenv-client - {shown}", text), (name, text)
        # a trial's page: the multi-step one, its steps' rewards and the first step's actions
        trial = page_text(
            chromium, f"{url}/jobs/{job}/trials/{trials['multi'].name}", tmp_path / "p2"
        )
        assert re.search(r"#1 create .*? 1\.00 #2 fill .*? 0\.50", trial), trial
        assert "Step one: create a.txt" in trial and "touch a.txt" in trial
    finally:
        stop_process(view, timeout=20)
        log.close()
    print(f"screenshot: {screenshot}")
    assert screenshot.stat().st_size > 10_000


@pytest.mark.docker
def test_a_served_episode_is_recorded_with_its_reward(docker_client, tmp_path) -> None:
    """Through a real server: HARBOR_OPENENV_RECORD_DIR records each episode, its agent steps
    and its verifier's reward (or its error), and the job ends when the server stops."""
    records = tmp_path / "records"
    server = Server(FIXTURE_TASKS, HARBOR_OPENENV_RECORD_DIR=str(records))
    with server, server.client() as env:
        env.reset(task_id="edit-file")
        env.write("answer.txt", "42")
        assert env.evaluate().reward == 1.0
        env.reset(task_id="no-reward")
        assert env.evaluate().reward is None
    (job,) = records.iterdir()
    results = {
        load(trial / "result.json")["task_name"]: (trial, load(trial / "result.json"))
        for trial in job.iterdir()
        if trial.is_dir()
    }
    assert set(results) == {"edit-file", "no-reward"}
    trial, solved = results["edit-file"]
    assert solved["verifier_result"]["rewards"]["reward"] == 1.0
    steps = load(trial / "agent" / "trajectory.json")["steps"]
    assert any("answer.txt" in json.dumps(step) for step in steps), steps
    assert "TOKEN" not in json.dumps(steps) and server.token not in json.dumps(steps)
    _, unrewarded = results["no-reward"]
    assert unrewarded["verifier_result"] is None and unrewarded["exception_info"]
    assert load(job / "result.json")["finished_at"]
