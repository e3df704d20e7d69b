"""Recorded rollouts made with the recorder alone, for the record tests of two layers."""

from __future__ import annotations

from pathlib import Path

from harbor_openenv.config import Settings
from harbor_openenv.episode.record import Recorder
from harbor_openenv.tasks.reward import Failure

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
    three.verified(None, None, {}, "test.sh: line 3: oops\n", NO_REWARD, Failure.NO_REWARD)
    three.finish()
    rec.flush()
    return {"single": one.trial_dir, "multi": two.trial_dir, "none": three.trial_dir}


ROLLOUT_TURNS = [  # as info["rollout"]["turns"] has them: the proxy's record of two model calls
    {
        "node_id": "n0",
        "parent_id": None,
        "n_prompt": 4,
        "n_sampled": 3,
        "prompt_token_ids": [1, 2, 3, 4],
        "completion_token_ids": [5, 6, 7],
        "logprobs": [-0.1, -0.2, -0.3],
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
    },
    {
        "node_id": "n1",
        "parent_id": "n0",
        "n_prompt": 9,
        "n_sampled": 2,
        "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9],
        "completion_token_ids": [10, 11],
        "logprobs": [-0.5, -0.6],
        "message": {"role": "assistant", "content": "done"},
    },
]


def record_rollout(rec: Recorder) -> Path:
    """A rollout: its action (not an agent step), its captured turns, its verifier's reward."""
    ep = rec.start("hello-world", "Write hello.txt saying Hello, world!", "episode-r")
    ep.rollout("mini-swe-agent", "scripted-model", ROLLOUT_TURNS)
    ep.step(
        {"action_type": "rollout", "harness": "mini-swe-agent", "model": "scripted-model"},
        {"output": "PASS", "reward": 1.0, "done": True},
    )
    ep.verified(None, 1.0, {"reward": 1.0}, "PASS", None)
    ep.finish()
    rec.flush()
    return ep.trial_dir
