"""HarborEnvironment and Episode without uvicorn or Docker: a runtime whose sandboxes are fakes
(tests/support/_fake_sandbox.py). The real-engine tests (tests/engine,
tests/hostile) stay the proof of what a container does."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pytest
from _fake_sandbox import FakeSandbox
from _memory_backend import MemoryBackend

from harbor_openenv.config import Settings
from harbor_openenv.episode.episode import Episode
from harbor_openenv.episode.runtime import Runtime
from harbor_openenv.models import HarborAction
from harbor_openenv.server.environment import HarborEnvironment
from harbor_openenv.tasks.reward import Failure

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TOKEN = "unit-token"


class FakeRuntime(Runtime):
    """A Runtime on the in-memory backend (tests/support/_memory_backend.py)."""

    def __init__(
        self, tasks_root: Path, *, backend: MemoryBackend | None = None, **settings: Any
    ) -> None:
        self.fake = backend or MemoryBackend()
        super().__init__(
            tasks_root, Settings(orchestration_token=TOKEN, **settings), backend=self.fake
        )
        self.sandboxes = self.fake.sandboxes


@pytest.fixture
def runtime() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(FIXTURES / "tasks")
    yield runtime
    runtime.shutdown()


@pytest.fixture
def env(runtime: FakeRuntime) -> HarborEnvironment:
    return HarborEnvironment(runtime)


def act(env: HarborEnvironment, kind: str, **fields: Any) -> Any:
    return env.step(HarborAction(action_type=kind, **fields))


def test_reset_starts_an_episode_and_reports_its_task(env, runtime):
    obs = env.reset(task_id="edit-file")
    assert obs.error is None and not obs.done
    assert obs.task_id == "edit-file" and obs.instruction
    assert obs.info["agent_timeout_sec"] == 120 and obs.info["verifier_timeout_sec"] == 60
    assert obs.info["exec_timeout_s"] == runtime.settings.exec_timeout_s
    assert env.state.task_id == "edit-file" and env.state.workdir == obs.workdir
    assert env.state.task_count == len(runtime.dataset)


def test_agent_actions_run_in_the_sandbox(env, runtime):
    env.reset(task_id="edit-file")
    sandbox = runtime.sandboxes[-1]
    assert act(env, "exec", command="echo hi").output == "hi\n"
    assert act(env, "write", path="answer.txt", content="42").output.startswith("wrote 2 bytes")
    read = act(env, "read", path="answer.txt")
    assert (read.output, read.encoding) == ("42", "utf-8")
    sandbox.files["/work/blob"] = b"\xff\x00"
    assert act(env, "read", path="blob").encoding == "base64"
    assert "answer.txt" in act(env, "list").output
    assert env.state.step_count == 5


def test_agent_errors_leave_the_episode_running(env, runtime):
    env.reset(task_id="edit-file")
    assert act(env, "exec").error == "exec needs a command"
    assert act(env, "write", path="x", content="!", encoding="base64").error == (
        "content is not valid base64"
    )
    assert act(env, "read", path="../etc/passwd").error.startswith("refused: ")
    assert act(env, "read").error == "read needs a path"
    obs = act(env, "exec", command="echo still")
    assert obs.error is None and obs.output == "still\n"


def test_write_over_the_limit_is_refused(runtime):
    runtime = FakeRuntime(FIXTURES / "tasks", max_write_bytes=4)
    env = HarborEnvironment(runtime)
    env.reset(task_id="edit-file")
    assert "over this server's limit of 4" in act(env, "write", path="f", content="12345").error
    runtime.shutdown()


def test_orchestration_needs_the_token(env):
    env.reset(task_id="edit-file")
    for kind in ("evaluate", "solve"):
        obs = act(env, kind)
        assert "orchestration token" in obs.error and not obs.done
        assert "orchestration token" in act(env, kind, token="wrong").error


@pytest.mark.parametrize(("solve", "reward"), [(True, 1.0), (False, 0.0)])
def test_evaluate_grades_and_ends_the_episode(env, runtime, solve, reward):
    env.reset(task_id="edit-file")
    sandbox = runtime.sandboxes[-1]
    if solve:
        solved = act(env, "solve", token=TOKEN)
        assert solved.error is None and solved.output == "solved\n" and not solved.done
    obs = act(env, "evaluate", token=TOKEN)
    assert (obs.done, obs.reward, obs.error) == (True, reward, None)
    assert obs.output == f"graded {int(reward)}"
    assert env.state.evaluated and env.state.reward == reward
    stop = sandbox.called("stop_processes")[-1]
    assert stop == ("", "/logs/verifier", "/tests", "stage")
    assert (FIXTURES / "tasks/edit-file/tests", "/tests") in sandbox.called("put_dir")
    assert runtime.pool._active == 0 or sandbox.removals  # removed in the background
    after = act(env, "exec", command="true")
    assert after.error == "the episode has ended: call reset first" and after.done


def test_no_episode_before_reset(env):
    obs = act(env, "exec", command="true")
    assert obs.error.startswith("no episode is running in this session: call reset first (")
    assert "reconnected" in obs.error and not obs.done


def test_a_closed_session_never_acts_again(env, runtime):
    env.reset(task_id="edit-file")
    env.close()
    runtime.shutdown()
    assert runtime.sandboxes[-1].removed == 1
    assert "has been closed" in act(env, "exec", command="true").error
    assert env.reset(task_id="edit-file").done


def test_an_action_off_the_sessions_thread_is_refused_before_close_runs(env, runtime):
    """OpenEnv's reaper destroyed the session during a long action: its close is queued on the
    session's thread, and the socket's next reset arrives on OpenEnv's shared pool first. That
    reset must start nothing (before, it started a container after close had run)."""
    env.reset(task_id="edit-file")
    with ThreadPoolExecutor(max_workers=1) as shared:
        late = [shared.submit(env.reset, task_id="edit-file").result()]
        late.append(shared.submit(act, env, "exec", command="true").result())
    for obs in late:
        assert obs.done and "has been closed" in obs.error, obs
    assert len(runtime.sandboxes) == 1 and runtime.sandboxes[0].removed == 0  # close's to do
    env.close()
    assert runtime.sandboxes[0].removed == 1


def test_a_disk_overrun_ends_the_episode_on_the_next_step(env, runtime):
    env.reset(task_id="edit-file")
    runtime.sandboxes[-1].exceeded = "the episode's files passed 1 MB"
    obs = act(env, "exec", command="true")
    assert obs.done and obs.reward is None and obs.error == "the episode's files passed 1 MB"


def test_a_failing_orchestration_action_ends_the_episode(env, runtime):
    env.reset(task_id="edit-file")
    runtime.sandboxes[-1].fail_on = "/tests/test.sh"
    obs = act(env, "evaluate", token=TOKEN)
    assert obs.done and obs.reward is None
    assert obs.error.startswith("evaluate failed: the engine broke")
    assert env.state.evaluated


def test_a_failing_agent_action_is_answered_and_the_episode_goes_on(env, runtime):
    env.reset(task_id="edit-file")
    runtime.sandboxes[-1].fail_on = "boom"
    obs = act(env, "exec", command="boom")
    assert "the engine broke" in obs.error and not obs.done
    assert act(env, "exec", command="echo ok").output == "ok\n"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"task_id": "nope"}, "nope"),
        ({"index": 999}, "task index 999 is out of range"),
        ({"index": True}, "reset: index must be int"),
        ({"seed": "x"}, "reset: seed must be int"),
        ({"task_id": "text-only"}, "text-only task"),
    ],
)
def test_reset_refusals_end_before_any_sandbox(env, runtime, kwargs, error):
    obs = env.reset(**kwargs)
    assert obs.done and error in obs.error
    assert runtime.sandboxes == [] and runtime.pool._active == 0


def test_reset_picks_by_index_and_seed(env, runtime):
    ids = runtime.dataset.ids
    assert env.reset(index=1).task_id == ids[1]
    assert env.reset(seed=3).task_id in ids
    assert env.reset().task_id == ids[0]


def test_a_new_reset_ends_the_last_episode(env, runtime):
    env.reset(task_id="edit-file")
    env.reset(task_id="edit-file")
    env.close()
    runtime.shutdown()
    assert [s.removed for s in runtime.sandboxes] == [1, 1]


def test_multi_step_episode_advances_then_ends_with_the_mean(tmp_path):
    runtime = FakeRuntime(FIXTURES / "format")
    env = HarborEnvironment(runtime)
    try:
        obs = env.reset(task_id="multi-step")
        assert obs.error is None, obs.error
        assert obs.info["step"] == {"name": "one", "index": 0, "count": 2}
        sandbox = runtime.sandboxes[-1]
        assert sandbox.called("mark_baseline") == [None]
        act(env, "solve", token=TOKEN)
        command, user, _ = sandbox.called("exec")[-1]
        assert "/solution/solve.sh" in command and user == "agent"
        first = act(env, "evaluate", token=TOKEN)
        assert (first.done, first.reward, first.error) == (False, None, None)
        assert first.info["step"]["name"] == "two" and first.info["steps"][0]["reward"] == 1.0
        assert first.instruction and first.info["agent_timeout_sec"] == 120.0
        setup = sandbox.called("exec")[-1]
        assert setup[0] == "bash /app/setup.sh" and setup[1] == "agent"
        last = act(env, "evaluate", token=TOKEN)
        assert last.done and last.reward == 0.5
        assert last.info["reward_strategy"] == "mean"
        assert [step["reward"] for step in last.info["steps"]] == [1.0, 0.0]
    finally:
        runtime.shutdown()


def test_multi_step_gate_skips_the_remaining_steps():
    runtime = FakeRuntime(FIXTURES / "format")
    env = HarborEnvironment(runtime)
    try:
        env.reset(task_id="multi-step")
        episode = env._episode
        obs = act(env, "evaluate", token=TOKEN)
        assert obs.done and obs.reward == 0.0
        assert "the remaining steps are skipped" in obs.error
        # a min_reward stop is the episode's, whatever its message says of rewards
        assert episode.outcome.failure is Failure.EPISODE
    finally:
        runtime.shutdown()


def test_episode_start_and_end_count_against_the_pool(runtime):
    task = runtime.dataset["edit-file"]
    episode = Episode.start(runtime, task)
    assert episode.task is task and episode.step is None
    assert runtime.pool._active == 1
    episode.end()
    runtime.shutdown()
    assert runtime.pool._active == 0
    assert cast(FakeSandbox, episode.sandbox).removals == 1


def test_solve_without_solve_sh_is_refused_and_the_episode_goes_on(tmp_path):
    shutil.copytree(FIXTURES / "tasks" / "edit-file", tmp_path / "tasks" / "unsolved")
    shutil.rmtree(tmp_path / "tasks" / "unsolved" / "solution")
    runtime = FakeRuntime(tmp_path / "tasks")
    env = HarborEnvironment(runtime)
    try:
        env.reset(task_id="unsolved")
        obs = act(env, "solve", token=TOKEN)
        assert obs.error == "unsolved/solution/solve.sh: missing" and not obs.done
        assert act(env, "exec", command="echo on").output == "on\n"
    finally:
        runtime.shutdown()


def test_solve_stops_the_agent_and_runs_solve_sh_noninteractive(env, runtime):
    env.reset(task_id="edit-file")
    act(env, "solve", token=TOKEN)
    sandbox = runtime.sandboxes[-1]
    assert sandbox.called("stop_processes") == [None]
    command, _, variables = sandbox.called("exec")[-1]
    assert command == "(/solution/solve.sh) > /logs/agent/oracle.txt 2>&1"
    assert variables["DEBIAN_FRONTEND"] == "noninteractive"
    assert ("rm -rf /solution", ()) in sandbox.called("exec_root")
