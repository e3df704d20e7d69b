"""The rollout action against a real server, engine, harness (mini-swe-agent) and capture proxy;
the trainer's model is the scripted vLLM-like server (tests/support/_scripted_model.py), the one
double. A fixing script scores 1.0 and a non-fixing one 0.0 on the bundled examples, the answer's
token ids are the model's own turn by turn, linked by prefix; eight concurrent rollouts on one
server keep to their own sessions; a crash, a timeout or a refused endpoint give no reward."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import pytest
from _scripted_model import CRASH, SUBMIT, ScriptedModel, decode
from _server import ROOT, Server, runtime_containers, wait_until

from harbor_openenv import HarborAction

pytestmark = pytest.mark.docker

EXAMPLES = ROOT / "examples" / "dataset" / "tasks"
HELLO = "printf 'Hello, world!\\n' > hello.txt"
FIX_SUM = "sed -i 's/range(1, len(numbers))/range(len(numbers))/' sum_utils.py"
SCRIPTS = {
    "fix-hello": ["ls -la", HELLO, SUBMIT],
    "miss-hello": ["echo 'Goodbye' > hello.txt", SUBMIT],
    "fix-sum": ["cat sum_utils.py", FIX_SUM, SUBMIT],
    "miss-sum": ["cat sum_utils.py", SUBMIT],
    "crash": [CRASH],
    "sleepy": ["sleep 60", SUBMIT],
    "record-hello": ["echo recorded", HELLO, SUBMIT],
    **{f"fix-hello-{i}": [f"echo marker-{i}", HELLO, SUBMIT] for i in range(8)},
}


@pytest.fixture(scope="module")
def model():
    with ScriptedModel(SCRIPTS) as scripted:
        yield scripted


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return tmp_path_factory.mktemp("records")


@pytest.fixture(scope="module")
def server(records):
    srv = Server(EXAMPLES, HARBOR_OPENENV_MAX_SESSIONS="10", HARBOR_OPENENV_RECORD_DIR=str(records))
    yield srv
    srv.stop()


def rollout(server, model, task, script, **fields):
    return server.rollout(task, "mini-swe-agent", base_url=model.base_url, model=script, **fields)


@pytest.mark.parametrize(
    ("task", "script", "reward"),
    [
        ("hello-world", "fix-hello", 1.0),
        ("hello-world", "miss-hello", 0.0),
        ("fix-sum-bug", "fix-sum", 1.0),
        ("fix-sum-bug", "miss-sum", 0.0),
    ],
)
def test_a_rollout_is_graded_as_evaluate_grades(server, model, task, script, reward):
    answer = rollout(server, model, task, script, max_turns=10, timeout_s=120)
    assert answer.error is None, answer.error
    assert (answer.action_type, answer.done, answer.reward) == ("rollout", True, reward)
    captured = answer.info["rollout"]
    assert captured["harness"] == "mini-swe-agent" and captured["status"] == "completed"
    assert captured["capture_level"] == "tokens" and captured["trainable"], captured["validation"]
    assert answer.info["verifier_environment"] == "shared"  # evaluate's own info came along


def test_token_ids_are_the_models_turn_by_turn_and_linked_by_prefix(server, model):
    answer = rollout(server, model, "hello-world", "fix-hello", max_turns=10, timeout_s=120)
    turns = answer.info["rollout"]["turns"]
    sent = model.turns("fix-hello")[-len(SCRIPTS["fix-hello"]) :]
    assert len(turns) == len(sent) == 3
    for turn, call in zip(turns, sent, strict=True):
        assert turn["prompt_token_ids"] == call["prompt_token_ids"]
        assert turn["completion_token_ids"] == call["completion_token_ids"]
        assert turn["logprobs"] == pytest.approx(call["logprobs"])
    # each turn's parent is the one before: its prompt + completion is this prompt's prefix
    assert turns[0]["parent_id"] is None
    for parent, child in pairwise(turns):
        assert child["parent_id"] == parent["node_id"]
        head = parent["prompt_token_ids"] + parent["completion_token_ids"]
        assert child["prompt_token_ids"][: len(head)] == head
    (sequence,) = answer.info["rollout"]["sequences"]
    assert sum(sequence["loss_mask"]) == sum(len(t["completion_token_ids"]) for t in turns)
    assert "marker" not in decode(sequence["input_ids"])


def test_a_rollout_is_recorded_with_the_proxys_token_data(server, model, records):
    answer = rollout(server, model, "hello-world", "record-hello", max_turns=10, timeout_s=120)
    turns = answer.info["rollout"]["turns"]
    completions = [t["completion_token_ids"] for t in turns]

    def recorded():
        for path in records.glob("*/*/result.json"):
            result = json.loads(path.read_text())
            details = result.get("agent_result", {}).get("rollout_details")
            if details and details[0]["completion_token_ids"] == completions:
                return path.parent, result
        return None

    assert wait_until(lambda: recorded() is not None, timeout=30)
    trial, result = recorded()
    assert result["verifier_result"]["rewards"] == {"reward": 1.0}
    (detail,) = result["agent_result"]["rollout_details"]
    assert detail["prompt_token_ids"] == [t["prompt_token_ids"] for t in turns]
    steps = json.loads((trial / "agent" / "trajectory.json").read_text())["steps"]
    agent = [s["metrics"]["completion_token_ids"] for s in steps if s["source"] == "agent"]
    assert agent == completions


def test_eight_concurrent_rollouts_keep_to_their_own_sessions(server, model):
    def one(i: int):
        return rollout(server, model, "hello-world", f"fix-hello-{i}", max_turns=10, timeout_s=300)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(8)))
    for i, answer in enumerate(answers):
        assert answer.reward == 1.0, answer.error
        turns = answer.info["rollout"]["turns"]
        text = "".join(decode(t["prompt_token_ids"] + t["completion_token_ids"]) for t in turns)
        assert f"marker-{i}" in text
        assert not [j for j in range(8) if j != i and f"marker-{j}" in text]
        sent = model.turns(f"fix-hello-{i}")
        assert [t["completion_token_ids"] for t in turns] == [
            c["completion_token_ids"] for c in sent
        ]


def test_a_crashed_harness_gets_no_reward(server, model):
    answer = rollout(server, model, "hello-world", "crash", max_turns=5, timeout_s=60)
    assert answer.done and answer.reward is None
    assert "crashed" in answer.error
    assert answer.info["rollout"]["status"] == "crashed"


def test_a_harness_out_of_time_gets_no_reward(server, model):
    answer = rollout(server, model, "hello-world", "sleepy", max_turns=5, timeout_s=8)
    assert answer.done and answer.reward is None
    assert "ran out of time" in answer.error


def test_the_turn_budget_stops_the_harness_and_it_is_graded(server, model):
    answer = rollout(server, model, "hello-world", "fix-hello", max_turns=1, timeout_s=60)
    assert answer.info["rollout"]["status"] == "turn_limit"
    assert answer.reward == 0.0  # one call (ls): nothing written; graded, as evaluate grades
    assert len(answer.info["rollout"]["turns"]) == 1


def test_refused_rollouts_leave_the_episode_running(server, model):
    with server.client() as env:
        env.reset(task_id="hello-world")
        base = {"base_url": model.base_url, "model": "fix-hello"}
        no_token = env.step(HarborAction(action_type="rollout", harness="mini-swe-agent", **base))
        assert "orchestration token" in no_token.observation.error
        unknown = env.rollout("nope", **base).observation
        assert "no harness 'nope'" in unknown.error and not unknown.done
        missing = env.step(HarborAction(action_type="rollout", token=server.token))
        assert "needs harness" in missing.observation.error
        assert env.exec("true").observation.exit_code == 0  # the episode goes on


def test_step_level_episodes_are_unchanged_beside_rollouts(server, model):
    with server.client() as env:
        env.reset(task_id="hello-world")
        env.exec("printf 'Hello, world!\\n' > hello.txt")
        assert env.evaluate().reward == 1.0


def test_no_container_is_left(server):
    import docker

    client = docker.from_env()
    assert wait_until(lambda: not runtime_containers(client, server.owner_prefix), timeout=60)
