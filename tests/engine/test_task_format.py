"""The rest of Harbor's task format on a real server over tests/fixtures/format/: multi-step
tasks, separate verifiers, a compose sidecar, env templates, users, workdir, network mode,
healthchecks and up-front refusals; each runs with no agent action (nop) and with the oracle.
Compose as public tasks write it is tests/engine/test_compose.py; the parsing alone,
tests/unit/test_task_toml.py."""

from __future__ import annotations

import pytest
from _episodes import run
from _server import ROOT, Server, exec_channel_on, wait_until

FORMAT_TASKS = ROOT / "tests" / "fixtures" / "format"
PROJECT_LABEL = "harbor-openenv.compose-project"


@pytest.fixture(scope="module")
def fmt(docker_client):
    srv = Server(FORMAT_TASKS, HOE_FORMAT_GREETING="hello", HARBOR_OPENENV_MAX_SESSIONS="4")
    yield srv
    srv.stop()


# -- multi-step -----------------------------------------------------------------------------------


def test_multi_step_oracle_walks_every_step(fmt):
    with fmt.client() as env:
        first = env.reset(task_id="multi-step")
        obs = first.observation
        assert obs.instruction.startswith("Write `one`")
        assert obs.info["step"] == {"name": "one", "index": 0, "count": 2}
        assert env.exec("id -un").observation.output.strip() == "agent"  # [agent].user
        env.solve()
        middle = env.evaluate()
        assert (middle.done, middle.reward) == (False, None)  # the reward comes once, at the end
        assert middle.observation.error is None
        assert middle.observation.info["steps"][0]["reward"] == 1.0
        assert middle.observation.instruction.startswith("Copy /app/seed.txt")
        assert middle.observation.info["step"]["name"] == "two"
        assert middle.observation.info["agent_timeout_sec"] == 120.0  # the step's own
        # the step's workdir arrived, its setup.sh ran as the agent, step one's tests are gone
        ls = env.exec("cat seed.txt setup-note.txt; find /tests /logs/verifier -mindepth 1 | wc -l")
        assert ls.observation.output.split() == ["seeded", "from-setup", "0"]
        env.solve()
        last = env.evaluate()
        assert last.done and last.reward == 1.0
        info = last.observation.info
        assert [s["name"] for s in info["steps"]] == ["one", "two"]
        assert [s["reward"] for s in info["steps"]] == [1.0, 1.0]
        assert info["steps"][1]["metrics"] == {"reward": 1.0, "clean": 1.0}
        assert info["reward_strategy"] == "mean"
        assert env.exec("true").observation.error  # the episode is over


def test_multi_step_nop_stops_at_min_reward(fmt):
    with fmt.client() as env:
        seen = run(env, "multi-step", oracle_steps=0)
    assert len(seen) == 2  # reset, then one evaluate that ends the episode
    last = seen[-1]
    assert last.done and last.reward == 0.0
    assert "below min_reward 1" in last.error
    assert [s["name"] for s in last.info["steps"]] == ["one"]


def test_multi_step_mean_and_final_strategies(fmt):
    with fmt.client() as env:
        mean = run(env, "multi-step", oracle_steps=1)[-1]
        final = run(env, "multi-step-final", oracle_steps=1)[-1]
        final_nop = run(env, "multi-step-final", oracle_steps=0)
    # step one solved (1), step two not (0): mean 0.5, final 0
    assert [s["reward"] for s in mean.info["steps"]] == [1.0, 0.0]
    assert mean.reward == 0.5
    assert mean.info["final_metrics"] == {"reward": 0.5, "clean": 0.5}
    assert [s["reward"] for s in final.info["steps"]] == [1.0, 0.0]
    assert final.reward == 0.0
    # without min_reward the nop walks both steps
    assert len(final_nop) == 3 and final_nop[1].done is False and final_nop[-1].reward == 0.0


# -- separate verifier ---------------------------------------------------------------------------


def test_separate_verifier_runs_in_its_own_image_with_artifacts(fmt, docker_client):
    with fmt.client() as env:
        nop = run(env, "separate-verifier", oracle_steps=0)[-1]
        oracle = run(env, "separate-verifier", oracle_steps=1)[-1]
    assert nop.done and nop.reward == 0.0
    assert nop.info["metrics"]["own_image"] == 1.0
    assert oracle.reward == 1.0
    metrics = oracle.info["metrics"]
    assert metrics == {"reward": 1.0, "own_image": 1.0, "logs_artifacts": 1.0, "data": 1.0}


# -- compose -------------------------------------------------------------------------------------


def _leftovers(client, owner_prefix: str) -> list[str]:
    def ours(labels: dict[str, str]) -> bool:
        owner = labels.get("harbor-openenv.owner", "")
        return PROJECT_LABEL in labels and owner.startswith(owner_prefix)

    # The low-level container list, which does not inspect (and 404 on) containers removed
    # meanwhile.
    containers = client.api.containers(all=True, filters={"label": PROJECT_LABEL})
    found = [f"Container {c['Names'][0].lstrip('/')}" for c in containers if ours(c["Labels"])]
    for kind in (client.networks, client.volumes):
        for item in kind.list():
            if ours(item.attrs.get("Labels") or {}):
                found.append(f"{type(item).__name__} {item.name}")
    return found


def test_compose_task_with_sidecar_nop_and_oracle_leaves_nothing(fmt, docker_client):
    with fmt.client() as env:
        reset = env.reset(task_id="compose")
        assert reset.observation.error is None, reset.observation.error
        # the sidecar and its volume are up and labelled while the episode runs
        assert len(_leftovers(docker_client, fmt.owner_prefix)) >= 4  # 2 containers, net, vol
        assert env.exec("hostname -i >/dev/null && pwd").observation.output.strip() == "/app"
        parent = env.exec("tr '\\0' ' ' < /proc/$PPID/cmdline").observation.output
        assert (parent == "/.harbor-openenv/helper serve ") == exec_channel_on()  # main's channel
        nop = env.evaluate()
        oracle = run(env, "compose", oracle_steps=1)[-1]
    assert (nop.done, nop.reward) == (True, 0.0)
    assert (oracle.done, oracle.reward) == (True, 1.0)
    assert wait_until(lambda: not _leftovers(docker_client, fmt.owner_prefix), timeout=30), (
        _leftovers(docker_client, fmt.owner_prefix)
    )


# -- compose, as public Harbor tasks write it -------------------------------------------------


# -- task.toml options ---------------------------------------------------------------------------


def test_env_users_workdir_network_and_healthcheck(fmt):
    with fmt.client() as env:
        reset = env.reset(task_id="options")
        assert reset.observation.error is None, reset.observation.error
        assert reset.observation.workdir == "/work/here"
        probe = env.exec('id -un; echo "$GREETING $FALLBACK $LITERAL"; ls /sys/class/net')
        assert probe.observation.output.split() == ["agent", "hello", "fallback", "plain", "lo"]
        nop = env.evaluate()
        oracle = run(env, "options", oracle_steps=1)[-1]
    checks = {"user": 1.0, "env": 1.0, "workdir": 1.0, "network": 1.0, "healthy": 1.0}
    assert nop.reward == 0.0 and nop.observation.info["metrics"] == {"reward": 0.0, **checks}
    assert oracle.reward == 1.0 and oracle.info["metrics"] == {"reward": 1.0, **checks}


def test_unset_env_variable_refuses_reset_naming_field_and_variable(fmt):
    with fmt.client() as env:
        result = env.reset(task_id="unset-env")
    assert result.done
    error = result.observation.error
    assert "[environment].env.NEED" in error and "HOE_FORMAT_NEVER_SET" in error


def test_gpu_task_is_refused_naming_the_field(fmt):
    with fmt.client() as env:
        result = env.reset(task_id="gpu")
    assert result.done and "[environment].gpus" in result.observation.error
