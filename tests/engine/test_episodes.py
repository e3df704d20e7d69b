"""Episodes on the shared server over the real engine, driven over the WebSocket API by the real
client: rewards (nop, oracle, planted, missing, several keys, timeouts), path escapes, refusals
(text-only, invalid and unknown tasks), exec timeouts and caps, the orchestration token."""

from __future__ import annotations

import shutil

import pytest
from _server import FIXTURE_TASKS, Server

pytestmark = pytest.mark.docker


def test_noop_scores_zero_and_oracle_scores_one(server):
    with server.client() as env:
        env.reset(task_id="edit-file")
        nop = env.evaluate()
        assert (nop.reward, nop.done, nop.observation.error) == (0.0, True, None)

        env.reset(task_id="edit-file")
        solved = env.solve()
        assert solved.observation.exit_code == 0 and not solved.done
        oracle = env.evaluate()
        assert (oracle.reward, oracle.done) == (1.0, True)


def test_agent_edit_through_write_scores_one(server):
    with server.client() as env:
        reset = env.reset(task_id="edit-file")
        assert reset.observation.workdir == "/work"  # the image's WORKDIR
        assert "42" in reset.observation.instruction
        written = env.write("answer.txt", "42\n")
        assert written.observation.error is None
        assert env.read("answer.txt").observation.output == "42\n"
        assert env.evaluate().reward == 1.0


def test_reward_planted_by_the_agent_never_counts(server):
    with server.client() as env:
        env.reset(task_id="edit-file")
        env.write(
            "plant.sh",
            "while true; do\n"
            "  echo 1 > /logs/verifier/reward.txt\n"
            "  echo '{\"reward\": 1}' > /logs/verifier/reward.json\n"
            "done\n",
        )
        planted = env.exec("nohup bash plant.sh >/dev/null 2>&1 &")
        assert planted.observation.exit_code == 0
        running = env.exec("sleep 0.5; grep -l plant.sh /proc/[0-9]*/cmdline | wc -l")
        assert int(running.observation.output) >= 1  # the planter is still at work
        result = env.evaluate()
        assert result.reward == 0.0, result.observation


def test_missing_reward_gives_none_and_an_error(server):
    with server.client() as env:
        env.reset(task_id="no-reward")
        result = env.evaluate()
        assert result.reward is None
        assert result.done
        assert "no reward" in result.observation.error
        assert "forgets to write a reward" in result.observation.output


def test_reward_json_with_several_keys(server):
    with server.client() as env:
        env.reset(task_id="multi-metric")
        result = env.evaluate()
        # reward.json wins over reward.txt (which says 1); its 'reward' key is the scalar.
        assert result.reward == 0.75
        info = result.observation.info
        assert info["metrics"] == {"score": 0.25, "reward": 0.75, "passed": 3.0}
        assert info["reward_details"] == {"resolved": False, "failing": ["test_b"]}


def test_the_reward_key_setting_picks_among_metrics_without_a_reward_key(tmp_path, docker_client):
    """A reward.json of several metrics and no 'reward' key: None with an error by default
    (Harbor reports the metrics without a reward), the named key or mean with the setting."""
    task = tmp_path / "tasks" / "metrics-only"
    shutil.copytree(FIXTURE_TASKS / "multi-metric", task)
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\necho \'{"f2p": 1, "p2p": 0.5}\' > /logs/verifier/reward.json\n'
    )
    for rule, expected in ((None, None), ("p2p", 0.5), ("mean:f2p,p2p", 0.75)):
        srv = Server(tmp_path / "tasks", **({"HARBOR_OPENENV_REWARD_KEY": rule} if rule else {}))
        try:
            with srv.client() as env:
                env.reset(task_id="metrics-only")
                result = env.evaluate()
        finally:
            srv.stop()
        assert result.reward == expected, (rule, result.observation.error)
        assert result.observation.info["metrics"] == {"f2p": 1.0, "p2p": 0.5}
        assert (result.observation.error is None) == (rule is not None), result.observation.error


def test_verifier_timeout_gives_none(server):
    with server.client() as env:
        env.reset(task_id="slow-verifier")
        result = env.evaluate()
        assert result.reward is None
        assert "timed out after 2 s" in result.observation.error


@pytest.mark.parametrize(
    ("setup", "path"),
    [
        (None, "../etc/passwd"),
        (None, "/tests/test.sh"),
        (None, "/etc/passwd"),
        ("mkdir -p /solution && echo secret > /solution/solve.sh && ln -s /solution sol", "sol"),
        ("ln -s /solution/solve.sh answer", "answer"),
        ("mkdir -p deep && ln -s ../.. deep/up", "deep/up/etc/passwd"),
    ],
)
def test_path_escapes_are_refused(server, setup, path):
    with server.client() as env:
        env.reset(task_id="edit-file")
        if setup:
            assert env.exec(setup).observation.exit_code == 0
        for result in (env.read(path), env.write(path, "x"), env.list(path)):
            assert result.observation.error is not None
            assert "refused" in result.observation.error, result.observation.error
        if setup and "secret" in setup:
            # The agent's own shell can read what the agent itself put there, nothing more:
            # /tests and /solution do not exist until the orchestrator stages them.
            assert env.exec("ls /tests").observation.exit_code != 0


def test_tests_and_solution_are_absent_until_staged(server):
    with server.client() as env:
        env.reset(task_id="edit-file")
        look = env.exec("ls -d /tests /solution 2>&1; true")
        assert "No such file" in look.observation.output
        env.solve()
        # The oracle has run; its files are gone again.
        assert env.exec("test -e /solution").observation.exit_code == 1


def test_text_only_task_is_refused_with_the_explanation(server):
    with server.client() as env:
        result = env.reset(task_id="text-only")
        assert result.done
        assert "text-only" in result.observation.error
        assert "solution/patch.diff" in result.observation.error


def test_invalid_task_names_the_file_and_field(server):
    with server.client() as env:
        result = env.reset(task_id="broken/nested-invalid")
        error = result.observation.error
        assert "broken/nested-invalid/task.toml" in error
        assert "[environment].cpus" in error


def test_unknown_task_id(server):
    with server.client() as env:
        assert "unknown task id 'nope'" in env.reset(task_id="nope").observation.error


def test_exec_timeout_kills_the_process(server):
    with server.client() as env:
        env.reset(task_id="edit-file")
        result = env.exec("sleep 1000 & sleep 1001; echo never", timeout_s=1)
        assert result.observation.timed_out
        assert result.observation.exit_code is None
        assert "never" not in result.observation.output
        left = env.exec("grep -l 'sleep 100[01]' /proc/[0-9]*/cmdline 2>/dev/null | wc -l")
        assert left.observation.output.strip() == "0"


def test_huge_output_is_capped(server):
    with server.client() as env:
        env.reset(task_id="edit-file")
        result = env.exec("head -c 100000000 /dev/zero | tr '\\0' a; echo; echo done >&2")
        assert result.observation.truncated
        assert result.observation.exit_code == 0
        assert len(result.observation.output) == 1 << 20  # the default cap
        assert set(result.observation.output) == {"a"}


def test_orchestration_needs_the_token(server):
    from harbor_openenv.client import HarborEnvClient

    with HarborEnvClient(server.url) as env:  # no token
        env.reset(task_id="edit-file")
        for result in (env.evaluate(), env.solve()):
            assert result.reward is None and not result.done
            assert "orchestration" in result.observation.error
        assert env.exec("true").observation.exit_code == 0  # the episode goes on
