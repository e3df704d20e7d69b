"""The rollout action on the in-memory runtime, with fake harnesses (the real one, mini-swe-agent
on the engine, is tests/engine/test_rollout.py) and the real capture proxy in front of the
scripted model: what is graded and what is not, and what the proxy lets a harness's key do."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import httpx
import pytest
from _scripted_model import SUBMIT, ScriptedModel

from harbor_openenv.harness import HARNESSES, HarnessResult, HarnessRun
from harbor_openenv.harness.capture import CaptureProxy, TrainerEndpoint

from .test_episode import FIXTURES, TOKEN, FakeRuntime, act


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel({"scripted": ["true", SUBMIT]}) as scripted:
        yield scripted


class Fake:
    """A harness that does ``then(run)`` (its model calls included) and reports ``status``."""

    where: Literal["beside", "inside"] = "beside"

    def __init__(self, then: Callable[[HarnessRun], Any], status: str = "completed") -> None:
        self.name, self.then, self.status = "fake", then, status

    def run(self, run: HarnessRun) -> HarnessResult:
        self.then(run)
        return HarnessResult(self.status)  # type: ignore[arg-type]


def call_model(run: HarnessRun) -> dict[str, Any]:
    answer = httpx.post(
        f"{run.model.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {run.model.api_key}"},
        json={
            "model": run.model.model,
            "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "go"}],
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": {}}}],
        },
        timeout=30,
    )
    answer.raise_for_status()
    return dict(answer.json())


def solve(run: HarnessRun) -> None:
    call_model(run)
    run.sandbox.exec("bash /solution/solve.sh", timeout_s=10, max_output=100)


def raises(run: HarnessRun) -> None:
    raise RuntimeError("the harness broke")


@pytest.fixture
def env_with(monkeypatch):
    runtimes = []

    def make(harness: Fake):
        monkeypatch.setitem(HARNESSES, "fake", lambda settings: harness)
        runtime = FakeRuntime(FIXTURES / "tasks")
        runtimes.append(runtime)
        from harbor_openenv.server.environment import HarborEnvironment

        env = HarborEnvironment(runtime)
        env.reset(task_id="edit-file")
        return env, runtime

    yield make
    for runtime in runtimes:
        runtime.shutdown()


def rollout(env, model: ScriptedModel, **fields: Any):
    return act(
        env,
        "rollout",
        token=TOKEN,
        harness="fake",
        base_url=model.base_url,
        model="scripted",
        **{"timeout_s": 30, **fields},
    )


def test_a_harness_that_called_the_model_is_graded_and_its_capture_returned(env_with, model):
    env, runtime = env_with(Fake(solve))
    answer = rollout(env, model)
    assert (answer.done, answer.reward, answer.error) == (True, 1.0, None)
    captured = answer.info["rollout"]
    (turn,) = captured["turns"]
    assert turn["completion_token_ids"] == model.turns("scripted")[-1]["completion_token_ids"]
    assert captured["status"] == "completed" and captured["trainable"]
    assert runtime.sandboxes[-1].called("stop_processes")  # the stop before grading ran
    assert env.state.evaluated and env.state.reward == 1.0


@pytest.mark.parametrize(
    ("harness", "error"),
    [
        (Fake(lambda run: None), "never called the model"),
        (Fake(raises), "crashed: RuntimeError: the harness broke"),
        (Fake(call_model, status="crashed"), "crashed"),
        (Fake(solve, status="timeout"), "ran out of time"),
    ],
)
def test_a_failed_harness_gets_no_reward_and_no_grading(env_with, model, harness, error):
    env, runtime = env_with(harness)
    answer = rollout(env, model)
    assert answer.done and answer.reward is None and error in answer.error
    assert not any("/tests/test.sh" in c[0] for c in runtime.sandboxes[-1].called("exec"))
    assert env.state.evaluated and env.state.reward is None


def test_budgets_are_capped_by_the_server(env_with, model):
    seen: list[HarnessRun] = []
    env, _ = env_with(Fake(lambda run: (seen.append(run), solve(run))))
    rollout(env, model, max_turns=10**6, timeout_s=10**9)
    assert seen[0].budget.max_turns == 100 and seen[0].budget.timeout_s <= 1800


def test_the_harness_key_reaches_only_the_model(model):
    proxy = CaptureProxy()
    try:
        session = proxy.open(TrainerEndpoint(model.base_url, "scripted"), max_model_calls=2)
        key = {"Authorization": f"Bearer {session.key}"}
        base = f"http://127.0.0.1:{proxy.port}"
        (bound,) = [s.getsockname()[0] for server in proxy._server.servers for s in server.sockets]
        assert bound == "127.0.0.1"
        for method, path in [
            ("GET", "/sessions"),
            ("POST", "/sessions"),
            ("GET", f"/sessions/{session.key}/rollout"),
            ("DELETE", f"/sessions/{session.key}"),
        ]:
            assert httpx.request(method, base + path, headers=key).status_code == 401, path
        stranger = {"Authorization": "Bearer s0123456789abcdef01234567"}
        completion = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        refused = httpx.post(f"{base}/v1/chat/completions", headers=stranger, json=completion)
        assert refused.status_code == 401
        assert httpx.post(f"{base}/v1/chat/completions", headers=key, json=completion).is_success
        session.close()
        closed = httpx.post(f"{base}/v1/chat/completions", headers=key, json=completion)
        assert closed.status_code == 401
    finally:
        proxy.stop()


def test_the_rollout_action_is_the_trainers_never_the_agents():
    from harbor_openenv.client import agent_tools
    from harbor_openenv.models import ORCHESTRATION_ACTIONS, ServedAction

    assert "rollout" in ORCHESTRATION_ACTIONS
    assert "rollout" not in {tool["function"]["name"] for tool in agent_tools()}
    served = ServedAction(action_type="rollout", token="t", api_key="trainer-key")
    assert "trainer-key" not in served.model_dump_json() + repr(served)
