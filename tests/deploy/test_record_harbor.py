"""Recorded rollouts as Harbor reads them: Harbor 0.25's own models load every file (in Harbor's
venv), ``harbor view`` shows each episode and its reward in headless Chromium, and an episode
served on the engine is recorded with its reward.

These need what .ci/interop-tools.sh installs (Harbor's venv, Debian's chromium); missing tools
fail them, nothing skips."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import httpx
import pytest
from _interop import CHROMIUM_ARGS, HARBOR_VENV
from _records import record_episodes, record_rollout, recorder
from _server import FIXTURE_TASKS, Server, wait_until

from harbor_openenv.client.launch import free_port, stop_process


def load(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


# -- the layout --------------------------------------------------------------------------------


# -- bounds ------------------------------------------------------------------------------------


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


@contextlib.contextmanager
def harbor_view(record_dir: Path, tmp_path: Path) -> Iterator[str]:
    """``harbor view`` of ``record_dir`` on a free port, healthy; its URL. Its output goes to a
    file (a full pipe would stall the server), shown when it does not come up."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "harbor-view.log"
    with log_path.open("w") as log:
        view = subprocess.Popen(
            [str(HARBOR_VENV / "bin" / "harbor"), "view", str(record_dir), "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:

            def up() -> bool:
                try:
                    return httpx.get(f"{url}/api/health", timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False

            assert wait_until(up, timeout=60), log_path.read_text()
            yield url
        finally:
            stop_process(view, timeout=20)


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


@pytest.mark.timeout(600)
def test_harbor_view_shows_each_episode_and_its_reward(tmp_path) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: run .ci/interop-tools.sh"
    rec = recorder(tmp_path)
    trials = record_episodes(rec)
    rec.close()
    with harbor_view(rec.record_dir, tmp_path) as url:
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
    print(f"screenshot: {screenshot}")
    assert screenshot.stat().st_size > 10_000


@pytest.mark.timeout(600)
def test_harbor_reads_a_rollouts_token_data_and_view_shows_its_tokens(tmp_path) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: run .ci/interop-tools.sh"
    rec = recorder(tmp_path)
    trial = record_rollout(rec)
    rec.close()
    harbor = subprocess.run(
        [str(HARBOR_VENV / "bin" / "python"), "-W", "ignore", "-c", HARBOR_LOADS, str(rec.job_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert harbor.returncode == 0, harbor.stderr
    assert [trial.name, {"reward": 1.0}, None] in json.loads(harbor.stdout)
    with harbor_view(rec.record_dir, tmp_path) as url:
        page = f"{url}/jobs/{rec.job_dir.name}/trials/{trial.name}"
        text = page_text(chromium, page, tmp_path / "profile")
        assert "No token data" not in text and "18 tokens" in text, text


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
