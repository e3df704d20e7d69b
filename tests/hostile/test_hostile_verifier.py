"""A hostile agent against evaluate and solve, at the server's default settings, as root and as an
unprivileged user: no reward it did not earn, no answer key it was not given, no server memory it
can claim. Each attack here scored or crashed before the helper, the engine reads and the
catch-all of evaluate (the issue "Hostile agents, round two"). The attacks on the shared server
run twice: on this machine's engine and on a remote one reached by TLS alone."""

from __future__ import annotations

import base64
import subprocess
import textwrap
from pathlib import Path

import pytest
from _remote import NO_SOCKET, remote_engine, remote_env
from _server import Server, runtime_containers

pytestmark = pytest.mark.docker

DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\nRUN chmod 777 /app\n"
# The verifier runs the agent's code (/app/hook.sh, as a task that imports the agent's module
# does), then grades /app/answer.txt. It takes a second, so a survivor would have time to plant.
GRADING = textwrap.dedent(
    """\
    #!/bin/bash
    [ -f /app/hook.sh ] && bash /app/hook.sh
    sleep 1
    if [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]; then r=1; else r=0; fi
    cd /logs/verifier && { [ -e reward.json ] || [ -e reward.txt ] || echo $r > reward.txt; }
    """
)
# Plants reward 1.0 in a loop (reward.json wins over the reward.txt a verifier writes).
PLANT_JSON = (
    "while :; do echo '{\"reward\": 1}' > /logs/verifier/reward.json 2>/dev/null; sleep 0.05;"
    " done\n"
)


def make_task(
    root: Path,
    name: str,
    test_sh: str = GRADING,
    toml: str = "",
    files: dict | None = None,
    dockerfile: str = DOCKERFILE,
) -> None:
    """A task folder: debian with a world-writable /app, the given test.sh, task.toml's tail and
    more ``files`` by relative path."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text(test_sh)
    (task / "instruction.md").write_text(f"Write 42 to /app/answer.txt ({name}).\n")
    (task / "task.toml").write_text(
        f'schema_version = "1.4"\n\n[verifier]\ntimeout_sec = 60\n{toml}'
    )
    for relative, text in (files or {}).items():
        path = task / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


HOOK_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
/* Loaded into every dynamic program through /etc/ld.so.preload: in the programs a runtime would
   use to stop processes, clear folders or read files, it starts a detached reward planter. */
__attribute__((constructor)) static void hook(void) {
    char comm[32] = {0};
    int fd = open("/proc/self/comm", O_RDONLY);
    if (fd < 0 || read(fd, comm, sizeof comm - 1) <= 0) return;
    close(fd);
    comm[strcspn(comm, "\n")] = 0;
    const char *tools[] = {"sh", "dash", "rm", "mkdir", "chmod", "base64", "tail", "wc",
                           "readlink", "head", "mv", "ls", "tr", "grep", "find", "kill", 0};
    int match = 0;
    for (int i = 0; tools[i]; i++) match |= strcmp(comm, tools[i]) == 0;
    if (!match || fork() != 0) return;
    setsid();
    if (fork() != 0) _exit(0);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0); dup2(null, 1); dup2(null, 2);
    for (int i = 0; i < 200; i++) {
        int out = open("/logs/verifier/reward.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out >= 0) { write(out, "1\n", 2); close(out); }
        usleep(50000);
    }
    _exit(0);
}
"""


@pytest.fixture(scope="module")
def hook_library(tmp_path_factory) -> bytes:
    folder = tmp_path_factory.mktemp("hook")
    (folder / "hook.c").write_text(HOOK_C)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-o", folder / "hook.so", folder / "hook.c"],
        check=True,
    )
    return (folder / "hook.so").read_bytes()


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile-verifier") / "tasks"
    make_task(root, "grade")
    make_task(root, "grade-nobody", toml='\n[agent]\nuser = "nobody"\n')
    two_steps = textwrap.dedent(
        """
        [[steps]]
        name = "one"
        [[steps]]
        name = "two"
        """
    )
    step_two = (
        "#!/bin/bash\nsleep 1\n"
        '[ "$(cat /app/two.txt 2>/dev/null)" = done ] && r=1 || r=0\n'
        "echo $r > /logs/verifier/reward.txt\n"
    )
    make_task(
        root,
        "steps",
        test_sh="#!/bin/true\n",
        toml=two_steps,
        files={
            "steps/one/instruction.md": "Make /app/check.sh exit 0.\n",
            "steps/one/tests/test.sh": (
                "#!/bin/bash\nbash /app/check.sh && r=1 || r=0\n"
                "echo $r > /logs/verifier/reward.txt\n"
            ),
            "steps/two/instruction.md": "Write done to /app/two.txt.\n",
            "steps/two/tests/test.sh": step_two,
        },
    )
    (root / "steps" / "tests" / "test.sh").unlink()
    (root / "steps" / "tests").rmdir()
    make_task(
        root,
        "separate",
        test_sh="#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n",
        toml='environment_mode = "separate"\n',
    )
    nobody = '\n[agent]\nuser = "nobody"\n'
    make_task(
        root,
        "files-nobody",
        toml=nobody,
        dockerfile=DOCKERFILE + "RUN echo secret > key && chmod 600 key && echo mine > own\n",
    )
    make_task(root, "root-workdir-nobody", toml=nobody + '\n[environment]\nworkdir = "/"\n')
    make_task(
        root,
        "oracle",
        files={"solution/solve.sh": "#!/bin/bash\necho 42 > /app/answer.txt\n"},
    )
    # A verifier that writes its reward early and corrects it once it has run the agent's code.
    optimistic = GRADING.replace(
        "[ -f /app/hook.sh ]", "echo 1 > /logs/verifier/reward.txt\n[ -f /app/hook.sh ]"
    ).replace("[ -e reward.json ] || [ -e reward.txt ] || ", "")
    make_task(root, "optimistic", test_sh=optimistic)
    return root


@pytest.fixture(scope="module", params=["local", "remote-tls"])
def srv(request, docker_client, tasks):
    """The server at its defaults (but the token), on this machine's engine, then on a remote one
    by TLS from a server that cannot reach this machine's engine (tests/support/_remote.py)."""
    if request.param == "local":
        server = Server(tasks)
        yield server
        server.stop()
        return
    with remote_engine(docker_client, "hostile") as engine:
        server = Server(tasks, prefix=NO_SOCKET, **remote_env(engine.tls_env))
        yield server
        server.stop()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.mark.parametrize("task", ["grade", "grade-nobody"])
def test_a_renamed_daemon_does_not_survive_into_the_verifier(srv, task):
    """Item 1: a daemon whose command name makes its stat line read like a zombie's."""
    with srv.client() as env:
        env.reset(task_id=task)
        env.write(
            "daemon.sh",
            'printf "a) Z 1 \\n" > /proc/self/comm\n'
            "while :; do echo 1 > /logs/verifier/reward.txt\n"
            "echo '{\"reward\": 1}' > /logs/verifier/reward.json; done 2>/dev/null\n",
        )
        started = env.exec("setsid bash daemon.sh </dev/null >/dev/null 2>&1 &")
        assert started.observation.exit_code == 0
        running = env.exec("sleep 0.5; grep -l 'a) Z 1' /proc/[0-9]*/stat")
        assert running.observation.output.count("/proc/") == 1, running.observation
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (0.0, None), result.observation


def test_a_daemon_started_by_step_ones_verifier_does_not_survive_into_step_two(srv):
    """Item 2: the baseline is taken once, before the agent's first action."""
    with srv.client() as env:
        env.reset(task_id="steps")
        env.write("plant.sh", PLANT_JSON)
        env.write("check.sh", "setsid bash /app/plant.sh </dev/null >/dev/null 2>&1 &\nexit 0\n")
        first = env.evaluate()
        assert (first.done, first.observation.info["steps"][0]["reward"]) == (False, 1.0)
        second = env.evaluate()  # step two unsolved: its own verifier must say 0
        assert second.done, second.observation
        assert second.observation.info["steps"][1]["reward"] == 0.0, second.observation
        assert second.reward == 0.5


def test_replaced_programs_cannot_fake_the_reward_read(srv):
    """Item 3: the reward files are read through the engine, not the container's base64."""
    fake = "#!/bin/sh\nprintf 'MQo='\n"  # what base64 of "1\n" would print
    with srv.client() as env:
        env.reset(task_id="grade")
        env.write("/app/base64", fake)
        moved = env.exec("cp /app/base64 /usr/bin/base64 && echo 1 | base64")
        assert moved.observation.output == "MQo=", moved.observation
        assert moved.observation.exit_code == 0
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (0.0, None), result.observation


def test_an_ld_so_preload_hook_cannot_plant_a_reward(srv, hook_library):
    """Item 5: a root agent's preload hook runs in every dynamic program; the runtime's own work
    in the container (stop, clear, read) runs none."""
    with srv.client() as env:
        env.reset(task_id="grade")
        encoded = base64.b64encode(hook_library).decode()
        assert env.write("hook.b64", encoded).observation.error is None
        armed = env.exec(
            "base64 -d hook.b64 > /app/hook.so && echo /app/hook.so > /etc/ld.so.preload"
            " && ls /app >/dev/null"
        )
        assert armed.observation.exit_code == 0
        planted = env.exec(  # the detached planter's first write, waited for up to 10 s
            "for i in $(seq 100); do [ -s /logs/verifier/reward.txt ] && break; sleep 0.1; done;"
            " cat /logs/verifier/reward.txt"
        )
        assert planted.observation.output.strip() == "1"  # the hook really plants
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (0.0, None), result.observation


DETAILS_ATTACKS = {
    "details nested 100,000 deep": ("reward-details.json", b"[" * 100000 + b"]" * 100000),
    "details nested 900 deep": ("reward-details.json", b"[" * 900 + b"]" * 900),
    "details not UTF-8": ("reward-details.json", b"\xff\xfe{"),
    "reward.json nested": ("reward.json", b'{"reward": ' + b"[" * 100000),
    "reward.json huge number": ("reward.json", b'{"reward": 1' + b"0" * 5000 + b"}"),
    "reward.json overflowing": ("reward.json", b'{"reward": 1' + b"0" * 400 + b"}"),
    "reward.json infinite": ("reward.json", b'{"reward": Infinity}'),
    "reward.txt not UTF-8": ("reward.txt", b"\xff1"),
}


@pytest.mark.parametrize("attack", list(DETAILS_ATTACKS))
def test_any_reward_file_content_ends_the_episode_with_an_answer(srv, attack):
    """Item 4: whatever the verifier (running the agent's code) leaves, evaluate answers with
    done=True, and the agent never acts again in a container holding /tests."""
    name, data = DETAILS_ATTACKS[attack]
    encoded = base64.b64encode(data).decode()
    with srv.client() as env:
        env.reset(task_id="grade")
        env.write("payload.b64", encoded)
        env.write("hook.sh", f"base64 -d /app/payload.b64 > /logs/verifier/{name}\n")
        env.write("answer.txt", "42")
        result = env.evaluate()
        assert result.done, result.observation
        if name == "reward-details.json":
            assert (result.reward, result.observation.error) == (1.0, None), result.observation
        else:
            assert result.reward is None and result.observation.error, result.observation
        again = env.exec("ls /tests")
        assert again.observation.error and "ended" in again.observation.error


def test_sparse_files_do_not_grow_the_server(srv):
    """Item 6: a 1.5 GiB sparse reward.json and one in /logs/artifacts of a separate verifier."""
    with srv.client() as env:
        env.reset(task_id="grade")
        env.write("hook.sh", "truncate -s 1536M /logs/verifier/reward.json\n")
        before = rss_mib(srv.process.pid)
        result = env.evaluate()
        grown = rss_mib(srv.process.pid) - before
        assert result.done and result.reward is None, result.observation
        assert "over the limit" in result.observation.error
        print(f"sparse reward.json: server grew {grown:.0f} MiB")
        assert grown < 100
    with srv.client() as env:
        env.reset(task_id="separate")
        env.exec("truncate -s 1536M /logs/artifacts/big")
        before = rss_mib(srv.process.pid)
        result = env.evaluate()
        grown = rss_mib(srv.process.pid) - before
        print(f"sparse artifact: server grew {grown:.0f} MiB; {result.observation.error}")
        assert result.done and result.reward is None, result.observation
        assert "HARBOR_OPENENV_MAX_ARTIFACT_BYTES" in result.observation.error
        assert grown < 100


def read_bytes(pid: int) -> int:
    """Bytes process ``pid`` has read so far, sockets included (``rchar``)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError(f"no rchar for {pid}")


def test_huge_files_in_the_verifiers_folder_are_left_unread(srv):
    """A 2 GiB log sorted before the reward files and a 2 GiB test-stdout.txt (sparse, within
    the disk guard's 10 GiB): the reward is read, the log's size is reported, and the server
    streams neither."""
    with srv.client() as env:
        env.reset(task_id="grade")
        env.write(
            "hook.sh",
            "truncate -s 2G /logs/verifier/a-huge.log /logs/verifier/test-stdout.txt\n",
        )
        env.write("answer.txt", "42")
        before = (read_bytes(srv.process.pid), rss_mib(srv.process.pid))
        result = env.evaluate()
        read = read_bytes(srv.process.pid) - before[0]
        grown = rss_mib(srv.process.pid) - before[1]
        assert (result.reward, result.observation.error) == (1.0, None), result.observation
        assert "test-stdout.txt is 2147483648 bytes" in result.observation.output
        print(f"huge verifier files: server read {read >> 20} MiB, grew {grown:.0f} MiB")
        assert read < 64 << 20 and grown < 100


def test_the_output_is_the_last_8_kib_and_a_hard_linked_reward_counts(srv):
    """The tail of a 1.3 MB test-stdout.txt, and a reward.txt hard-linked to another file of
    the folder (the folder's archive holds it as a link, so it is read alone)."""
    with srv.client() as env:
        env.reset(task_id="grade")
        env.write(
            "hook.sh",
            "seq 1 200000\nprintf 0.5 > /logs/verifier/a && ln /logs/verifier/a"
            " /logs/verifier/reward.txt\n",
        )
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (0.5, None), result.observation
        lines = "".join(f"{i}\n" for i in range(1, 200001))
        assert result.observation.output == lines[-8192:]


def test_solve_stops_the_agent_before_staging_the_solution(srv):
    """Item 9: a watcher that copies /solution while solve runs gets nothing."""
    watcher = (
        "setsid bash -c 'while :; do [ -e /solution/solve.sh ] && cp -r /solution /tmp/stolen;"
        " done' </dev/null >/dev/null 2>&1 &"
    )
    with srv.client() as env:
        env.reset(task_id="oracle")
        assert env.exec(watcher).observation.exit_code == 0
        solved = env.solve()
        assert solved.observation.exit_code == 0, solved.observation
        watched = env.exec("sleep 0.5; ls -A /tmp/stolen /solution")
        assert "No such file" in watched.observation.output, watched.observation
        assert "solve.sh" not in watched.observation.output, watched.observation
        assert env.evaluate().reward == 1.0


def test_file_actions_run_as_the_agents_user(srv):
    """Item 8: read/write/list have exactly the rights exec has, for an unprivileged agent."""
    with srv.client() as env:
        env.reset(task_id="files-nobody")
        assert env.exec("cat key").observation.exit_code != 0  # exec cannot read it
        read = env.read("key")
        assert read.observation.error and "secret" not in read.observation.output
        wrote = env.write("own", "overwritten")
        assert wrote.observation.error, wrote.observation
        assert env.exec("cat own").observation.output == "mine\n"
        assert env.write("new.txt", "fine").observation.error is None
        assert env.exec("stat -c %U new.txt").observation.output.strip() == "nobody"
    with srv.client() as env:
        env.reset(task_id="root-workdir-nobody")
        wrote = env.write("/etc/passwd", "root::0:0::/root:/bin/bash\n")
        assert wrote.observation.error, wrote.observation
        assert env.exec("id -u").observation.output.strip() != "0"
        passwd = env.exec("head -1 /etc/passwd").observation.output
        assert passwd.startswith("root:x:0:0"), passwd


def _size_rw(client, container: str) -> int:
    """The container's writable layer, as the engine counts it (the disk guard's measure)."""
    url = client.api._url("/containers/{0}/json", container)
    return client.api._result(client.api._get(url, params={"size": 1}), True)["SizeRw"]


def _newest(client, server: Server) -> dict:
    """The server's most recently created container: the running episode's (an ended episode's
    may still be being removed in the background)."""
    return max(runtime_containers(client, server.owner_prefix), key=lambda c: c["Created"])


def test_disk_use_is_bounded_by_default(docker_client, tasks):
    """Item 11: this engine (overlay2 on ext4) gives no quota, so the disk guard holds the
    limit: a task's storage_mb, else HARBOR_OPENENV_DISK_MB. Over it during grading, the guard
    stops the verifier too, and whatever reward it had written by then does not count."""
    server = Server(tasks, HARBOR_OPENENV_DISK_MB="200", HARBOR_OPENENV_DISK_CHECK_S="1")
    try:
        with server.client() as env:  # one write past the limit: the check after it ends it
            env.reset(task_id="grade")
            # the check runs in the background: it may end the episode during the write (the
            # write's own answer says so, channel off: seen in CI) or after it (the next one's)
            result = env.exec("head -c 300M /dev/zero > big")
            for _ in range(20):
                if result.done:
                    break
                result = env.exec("sleep 0.25")
            assert result.done and result.reward is None, result.observation
            assert "over its limit of 200 MB" in result.observation.error
        with server.client() as env:  # a foreground write over the channel: never run again
            env.reset(task_id="grade")
            result = env.exec("head -c 4G /dev/zero > big")  # the periodic check stops it
            found = _newest(docker_client, server)
            size = _size_rw(docker_client, found["Id"])
            print(f"disk guard: a 4 GiB foreground write stopped at {size / 2**20:.0f} MB")
            assert "over its limit of 200 MB" in (result.observation.error or ""), result
            assert size < 3 << 30  # before: the stopped command ran again through the engine
            assert env.exec("true").done
        with server.client() as env:  # a background writer: the periodic check ends it
            env.reset(task_id="grade")
            env.exec("setsid sh -c 'head -c 8G /dev/zero > big' </dev/null >/dev/null 2>&1 &")
            waited = env.exec("sleep 4")  # the guard stops every agent process, this one too
            found = _newest(docker_client, server)
            size = _size_rw(docker_client, found["Id"])
            print(f"disk guard: an 8 GiB background write stopped at {size / 2**20:.0f} MB")
            assert size < 4 << 30  # stopped long before its end (how far: the disk's speed)
            result = waited if waited.done else env.evaluate()  # the action it tripped in ends
            assert result.done and "over its limit" in (result.observation.error or "")
        with server.client() as env:  # the agent's code fills the disk while the verifier runs
            env.reset(task_id="optimistic")
            env.write("answer.txt", "41")
            env.write("hook.sh", "head -c 300M /dev/zero > /app/fill; sleep 30\n")
            result = env.evaluate()  # the guard stops the verifier after its early 1
            assert result.done and result.reward is None, result.observation
            assert "over its limit of 200 MB" in (result.observation.error or "")
    finally:
        server.stop()
