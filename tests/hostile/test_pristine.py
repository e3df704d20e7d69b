"""The pristine verifier (HARBOR_OPENENV_PRISTINE_VERIFIER): test.sh runs in a fresh container of
the task's image with the agent's working directory copied in, so nothing the agent changed
outside it reaches grading. Against a real server and engine, as root and as nobody."""

from __future__ import annotations

import textwrap

import pytest
from _server import Server, runtime_containers, wait_until

from .test_hostile_verifier import make_task

pytestmark = pytest.mark.docker

# Python reads the answer (so interpreter hooks apply), cat prints it (so a replaced cat does).
CHECK = textwrap.dedent(
    """\
    #!/bin/bash
    cd /app
    python3 -c "import sys; open(sys.argv[2], 'w').write('1' if sys.argv[1] == '42' else '0')" \
      "$(cat answer.txt 2>/dev/null)" /logs/verifier/reward.txt
    """
)
# The answer in /logs/artifacts, outside the workdir: it must travel to the fresh container.
ARTIFACTS = textwrap.dedent(
    """\
    #!/bin/bash
    [ "$(cat /logs/artifacts/out/answer.txt)" = 42 ] && echo 1 > /logs/verifier/reward.txt
    [ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
    """
)
FAKE_CAT = "#!/bin/sh\necho 42\n"
PTH_HOOK = (
    "import atexit; atexit.register(lambda: open('/logs/verifier/reward.txt', 'w').write('1'))\n"
)
SITE = "$(python3 -c 'import site; print(site.getsitepackages()[0])')"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("pristine") / "tasks"
    make_task(root, "grade", test_sh=CHECK)
    make_task(root, "grade-nobody", test_sh=CHECK, toml='\n[agent]\nuser = "nobody"\n')
    make_task(root, "grade-artifacts", test_sh=ARTIFACTS)
    return root


@pytest.fixture(scope="module", params=["shared", "pristine"])
def srv(request, docker_client, tasks):
    env = {"HARBOR_OPENENV_PRISTINE_VERIFIER": "grade*"} if request.param == "pristine" else {}
    server = Server(tasks, **env)
    server.mode = request.param
    yield server
    server.stop()


ROUTES = {
    "replaced cat": f"printf '{FAKE_CAT}' > /usr/bin/cat",
    "pth hook": f'mkdir -p "{SITE}" && printf "%s" "{PTH_HOOK}" > "{SITE}/zz-grade.pth"',
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_tampered_toolchain_scores_nothing_in_pristine_mode(srv, route):
    """Shared mode: the route fakes the pass (1.0) and the tamper report names it, always.
    Pristine mode: the verifier runs on the image's own programs: 0.0."""
    with srv.client() as env:
        env.reset(task_id="grade")
        env.write("answer.txt", "41")  # wrong
        done = env.exec(ROUTES[route])
        assert done.observation.exit_code == 0, done.observation
        result = env.evaluate()
    info = result.observation.info
    assert info["tamper"]["suspect"], info["tamper"]
    assert info["verifier_environment"] == srv.mode
    expected = 0.0 if srv.mode == "pristine" else 1.0
    assert (result.reward, result.observation.error) == (expected, None), result.observation


@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
def test_the_agents_work_is_graded_in_either_mode(srv, task):
    """The working directory arrives whole (owners kept: the nobody agent's file is its own)."""
    with srv.client() as env:
        env.reset(task_id=task)
        env.write("answer.txt", "42")
        env.exec("mkdir -p deep/er && echo x > deep/er/file && ln -s answer.txt link")
        result = env.evaluate()
    assert (result.reward, result.observation.error) == (1.0, None), result.observation


def test_the_fresh_environment_is_started_while_the_agent_works(srv, docker_client):
    """Pristine mode: a second container of the task's image runs from reset on (the spare the
    grading takes, its working directory already emptied), so evaluate waits for no start; once
    the episode ended, neither is left. Shared mode: one container."""
    with srv.client() as env:
        env.reset(task_id="grade")
        expected = 2 if srv.mode == "pristine" else 1
        assert wait_until(
            lambda: len(runtime_containers(docker_client, srv.owner_prefix)) == expected
        ), runtime_containers(docker_client, srv.owner_prefix)
        env.write("answer.txt", "42")
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (1.0, None), result.observation
    assert wait_until(lambda: runtime_containers(docker_client, srv.owner_prefix) == [])


def test_a_multi_step_task_grades_each_step_in_a_fresh_environment(docker_client):
    """Each step's verifier gets a spare of its own, readied with that step's tests: step two's
    checks that nothing of step one's grading is left pass, and the oracle scores both."""
    from _server import ROOT

    tasks = ROOT / "tests" / "fixtures" / "format"
    env_vars = {"HARBOR_OPENENV_PRISTINE_VERIFIER": "multi-step*", "HOE_FORMAT_GREETING": "hello"}
    with Server(tasks, **env_vars) as server, server.client() as env:
        env.reset(task_id="multi-step")
        env.solve()
        middle = env.evaluate()
        assert middle.observation.info["verifier_environment"] == "pristine"
        assert middle.observation.info["steps"][0]["reward"] == 1.0, middle.observation
        env.solve()
        last = env.evaluate()
        info = last.observation.info
    assert (last.done, last.reward, info["verifier_environment"]) == (True, 1.0, "pristine")
    assert info["steps"][1]["metrics"] == {"reward": 1.0, "clean": 1.0}, info


def test_the_agents_artifacts_reach_the_verifier_and_an_untouched_folder_is_left(srv):
    """/logs/artifacts travels when the agent wrote it (1.0), in either mode; left as set-up made
    it, the fresh container's own empty one stands (0.0, the verifier finds nothing)."""
    with srv.client() as env:
        env.reset(task_id="grade-artifacts")
        env.exec("mkdir -p /logs/artifacts/out && echo 42 > /logs/artifacts/out/answer.txt")
        written = env.evaluate()
        env.reset(task_id="grade-artifacts")
        untouched = env.evaluate()
    assert (written.reward, written.observation.error) == (1.0, None), written.observation
    assert (untouched.reward, untouched.observation.error) == (0.0, None), untouched.observation
