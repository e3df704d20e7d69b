"""Rollouts (issues 27 and 35): each harness's rollout action against the same harness run
directly, its per-episode install, and mini-swe-agent's rollouts per minute at 8 concurrent
sessions, in one run against scripted vLLM-like models on the bundled ``hello-world``.

The rollout is ``HarborEnvClient.rollout`` from the client: the WebSocket, the capture session and
proxy, the harness through the sandbox (inside ones: the relay and the keyed port), and the
grading, which no baseline does; a step-level evaluate of the same task is timed too, so the
rollout's time without grading is printed beside (the goal, <= 1.1x, is for that one).

The baselines run each harness on its own in a container of the same Dockerfile with the task's
limits (its task.toml's cpus and memory_mb, which Harbor's docker environment applies too), no
server:

- mini-swe-agent: its ``DefaultAgent`` and ``LitellmModel`` (the same ``mini.yaml`` config)
  calling the scripted model (tests/support/_scripted_model.py) with no proxy, its own
  ``DockerEnvironment`` (``docker exec`` per command), network none.
- the inside harnesses (codex and the harness cache's): a plain ``docker run`` of the image,
  network host, the build mounted read-only where the server mounts it, and Harbor's command
  lines (harbor_agents.json; codex's ``codex exec``) run by ``docker exec`` with the scripted
  model's URL (tests/support/_model.py) in place of the relayed one. A harness whose dialect the
  model does not speak (claude-code: Anthropic's, gemini-cli: Google's) reaches it through
  OpenEnv's capture proxy with no sessions, as a user of a vLLM endpoint would; the others reach
  the model itself. The install column is the mounted install's probe in that container (the
  build found and its libraries loading), its exec less an empty one, as a rollout runs it in its
  first command's shell; codex's is none (its launch line's check of the binary).

- terminus-2 (beside the container, as mini-swe-agent): Harbor's own ``Terminus2`` and its
  ``TmuxSession``, unmodified, in the bench's process, LiteLLM calling the scripted model with
  no proxy, each command a ``docker exec`` as Harbor's docker environment runs it (``bash -c``,
  the user Harbor asks), in a container as the inside harnesses' baseline has it. Its install
  step asks ``tmux -V`` and finds tmux, as in an image that has it installed: the cache's
  portable tmux, mounted read-only, behind a ``/usr/local/bin/tmux`` made before the clock
  starts (Harbor's own install would use the image's package manager, which no image here can
  reach). It needs Python >= 3.12 with Harbor: run the bench with the runtime's harbor extra
  (``.cache/harbor-server-venv/bin/python``, which has no mini-swe-agent: give ``--harness``);
  under another Python the default leaves terminus-2 out and says so.

    .venv/bin/python bench/rollout.py [--reps 5] [--concurrent 8] [--harness NAME ...]
        [--cache ~/.cache/harbor-openenv/harnesses] [--codex-package .cache/openai-codex-*.tgz]
    .cache/harbor-server-venv/bin/python bench/rollout.py --harness terminus-2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import shlex
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker
import docker.errors

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from _model import Call, Edit, Say, capture_proxy  # noqa: E402
from _model import ScriptedModel as DialectModel  # noqa: E402
from _scripted_model import SUBMIT, ScriptedModel  # noqa: E402

from harbor_openenv.client.launch import Server  # noqa: E402
from harbor_openenv.harness import cached, codex, terminus  # noqa: E402
from harbor_openenv.harness.base import Budget, HarnessRun, ModelEndpoint  # noqa: E402
from harbor_openenv.harness.cache import BUILDS, MANIFEST  # noqa: E402
from harbor_openenv.tasks.config import parse_task_config  # noqa: E402

TASKS = ROOT / "examples" / "dataset" / "tasks"
TASK = "hello-world"
SCRIPT = ["ls -la", "printf 'Hello, world!\\n' > hello.txt", "cat hello.txt", SUBMIT]
IMAGE = "harbor-openenv-bench-rollout:hello-world"
LABEL = {"harbor-openenv-bench": "rollout"}
INSIDE = ["codex", *cached.KINDS]  # the inside harnesses this bench runs
HARNESSES = ["mini-swe-agent", *INSIDE, "terminus-2"]
TERMINUS = "terminus"  # the scripted model's name for terminus-2's script
TERMINUS_SCRIPT = ["printf 'Hello, world!\\n' > /app/hello.txt", SUBMIT]  # SUBMIT: it confirms
HAS_HARBOR = importlib.util.find_spec("harbor") is not None
# The task's limits (task.toml's cpus and memory_mb), which Harbor's docker environment gives a
# harness run on its own as the server gives a rollout's container
LIMITS = parse_task_config((TASKS / TASK / "task.toml").read_text()).environment
FIX = [Call("printf 'Hello, world!\\n' > /app/hello.txt"), Say("Fixed.")]
AIDER_FIX = [Edit("hello.txt", "Hello, world!\n")]  # aider's one turn: the file's new text
TIMEOUT_S = 240.0


def direct(model: ScriptedModel, name: str) -> float:
    """mini-swe-agent alone against the scripted model, in a fresh container; the run's seconds."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments.docker import DockerEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    config = get_config_from_spec("mini")
    labels = [arg for key, value in LABEL.items() for arg in ("--label", f"{key}={value}")]
    environment = DockerEnvironment(
        image=IMAGE,
        cwd="/app",
        env=config["environment"]["env"],
        run_args=["--rm", "--network", "none", *labels, *limit_args()],
    )
    try:
        model_ = LitellmModel(
            model_name=f"openai/{name}",
            model_kwargs={"api_base": model.base_url, "api_key": "direct", "drop_params": True},
            cost_tracking="ignore_errors",
            observation_template=config["model"]["observation_template"],
            format_error_template=config["model"]["format_error_template"],
        )
        agent_config = {k: v for k, v in config["agent"].items() if k != "mode"}
        agent = DefaultAgent(model_, environment, **{**agent_config, "cost_limit": 0})
        start = time.perf_counter()
        ended = agent.run("Write 'Hello, world!' to /app/hello.txt.")
        seconds = time.perf_counter() - start
        assert ended.get("exit_status") == "Submitted", ended
        return seconds
    finally:
        environment.cleanup()


def limit_args() -> list[str]:
    """``docker run``'s flags for the task's limits."""
    cpus = ["--cpus", f"{LIMITS.cpus:g}"] if LIMITS.cpus else []
    return cpus + (["--memory", f"{LIMITS.memory_mb}m"] if LIMITS.memory_mb else [])


def rollout(server: Server, base_url: str, name: str, harness: str = "mini-swe-agent") -> float:
    """A rollout action of ``harness`` on the task, graded; its seconds."""
    with server.client() as env:
        env.reset(task_id=TASK)
        start = time.perf_counter()
        limits = {"max_turns": 10, "timeout_s": TIMEOUT_S}
        answer = env.rollout(harness, base_url=base_url, model=name, **limits).observation
        seconds = time.perf_counter() - start
    assert answer.reward == 1.0, (harness, answer.error)
    return seconds


@dataclass(frozen=True)
class Exec:
    exit_code: int
    output: str
    raw: bytes | None = None
    timed_out: bool = False


class Plain:
    """A container of the task's image as a harness run on its own has it: ``docker run``,
    network host (the model on 127.0.0.1), the task's limits, ``mounts`` read-only, Harbor's
    /logs/agent."""

    def __init__(self, client: docker.DockerClient, mounts: dict[Path, str]) -> None:
        volumes = {str(source): {"bind": target, "mode": "ro"} for source, target in mounts.items()}
        self.container: Any = client.containers.run(
            IMAGE,
            ["sh", "-c", "mkdir -p /logs/agent && exec sleep infinity"],
            detach=True,
            network_mode="host",
            volumes=volumes,
            labels=LABEL,
            nano_cpus=int(LIMITS.cpus * 1e9) if LIMITS.cpus else None,
            mem_limit=f"{LIMITS.memory_mb}m" if LIMITS.memory_mb else None,
        )

    def exec_root(self, script: str, *args: str) -> Exec:
        """What the harnesses' install probes call (``Sandbox.exec_root``): ``sh -c``."""
        return self.run(script, *args, shell="sh")

    def run(
        self, script: str, *args: str, env: dict[str, str] | None = None, shell: str = "bash"
    ) -> Exec:
        """``docker exec`` of ``shell -c script`` as root in /app (what ``Sandbox.exec`` runs)."""
        argv = [shell, "-c", script, *((shell, *args) if args else ())]
        found = self.container.exec_run(argv, environment=env, workdir="/app", user="root")
        return Exec(found.exit_code, found.output.decode(errors="replace"))

    def exec(self, command: str, *, user: str, **_: object) -> Exec:
        """What ``CachedHarness.locate`` calls (``Sandbox.exec``): ``bash -c`` as ``user``."""
        found = self.container.exec_run(["bash", "-c", command], workdir="/app", user=user)
        return Exec(found.exit_code, found.output.decode(errors="replace"))

    def fixed(self) -> bool:
        return self.run("cat /app/hello.txt").output == "Hello, world!\n"

    def __enter__(self) -> Plain:
        return self

    def __exit__(self, *_: object) -> None:
        self.container.remove(force=True)


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = call()
    return value, time.perf_counter() - start


def harness_run(container: Plain, base_url: str) -> HarnessRun:
    """The run a harness's own command lines are made from: the task's instruction, root in
    /app, the model at ``base_url`` (its port stands for the relayed one)."""
    instruction = (TASKS / TASK / "instruction.md").read_text()
    model = ModelEndpoint(base_url, "direct", "scripted")
    budget = Budget(10, TIMEOUT_S)
    return HarnessRun(container, instruction, "root", "/app", model, budget)  # type: ignore[arg-type]


def cached_direct(
    client: docker.DockerClient, name: str, cache: Path, url: str
) -> tuple[float, float]:
    """A harness of the cache on its own: its install probe's seconds (the probe's exec less an
    empty one: a rollout runs it in its first command's shell) and Harbor's commands'."""
    dialect, failure = cached.KINDS[name]
    port, settings = urlsplit(url).port or 80, cached.SETTINGS.get(name)
    harness = cached.CachedHarness(BUILDS[name], dialect, failure, port=port, env=settings)
    key = harness.placeholders["api_key"]
    with Plain(client, {cache: cached.MOUNTED}) as container:
        run = harness_run(container, url)
        folder, probe = timed(lambda: harness.locate(run))
        _, empty = timed(lambda: container.exec("true", user="root"))
        install = max(probe - empty, 0.0)
        start = time.perf_counter()
        for step in harness.steps:
            command, env = harness.shell(step, run)
            env = {variable: "direct" if value == key else value for variable, value in env.items()}
            line = f'export PATH="{folder}/bin:$PATH"; {cached.HOME}; {command}'
            done = container.run(line, env=env)
            assert done.exit_code == 0, (name, done.output[-2000:])
        seconds = time.perf_counter() - start
        assert failure(done.output) is None and container.fixed(), (name, done.output[-2000:])
    return install, seconds


def codex_direct(
    client: docker.DockerClient, package: Path, folder: Path, url: str
) -> tuple[float, float]:
    """Codex on its own, from ``folder`` (its volume archive unpacked): its install's seconds
    (none: the launch line finds it mounted) and ``codex exec``'s."""
    harness = codex.Codex(package, port=urlsplit(url).port or 80)
    with Plain(client, {folder / "codex": codex.MOUNTED}) as container:
        argv = harness.argv(harness_run(container, url), codex.MOUNTED)
        done, seconds = timed(lambda: container.run(codex.LAUNCH, *argv))
        assert done.exit_code == 0 and container.fixed(), done.output[-2000:]
    return 0.0, seconds


class HarborExec:
    """What Terminus2 and its TmuxSession call of Harbor's docker environment, as it runs them:
    ``docker exec`` of ``bash -c`` as the user asked (root for its probes), in /app."""

    default_user = None
    session_id = "terminus-2"

    def __init__(self, container: Plain) -> None:
        self.container = container.container

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> Any:
        from harbor.environments.base import ExecResult

        found = await asyncio.to_thread(
            self.container.exec_run,
            ["bash", "-c", command],
            environment=env,
            workdir=cwd or "/app",
            user=str(user or "root"),
            demux=True,
        )
        out, err = (part.decode(errors="replace") if part else "" for part in found.output)
        return ExecResult(stdout=out, stderr=err, return_code=found.exit_code)

    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        return bool((await self.exec(f"test -d {shlex.quote(path)}", user=user)).return_code == 0)


def terminus_direct(client: docker.DockerClient, cache: Path, url: str) -> tuple[float, float]:
    """terminus-2 on its own: the rollout's install probe's seconds (its exec less an empty
    one), and Harbor's Terminus2's (its setup and run) with tmux installed as an image would
    have it."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no cost map fetched
    from harbor.agents.terminus_2.terminus_2 import Terminus2
    from harbor.models.agent.context import AgentContext

    with (
        Plain(client, {cache: cached.MOUNTED}) as container,
        tempfile.TemporaryDirectory(prefix="bench-terminus-") as logs,
    ):
        run = harness_run(container, url)
        folder, probe = timed(lambda: terminus.Terminus(cache / "tmux").install(run))
        _, empty = timed(lambda: container.exec("true", user="root"))
        wrapper = f'printf "#!/bin/sh\\nexec {folder}/bin/tmux \\"\\$@\\"\\n"'
        made = container.run(f"{wrapper} > /usr/local/bin/tmux && chmod 755 /usr/local/bin/tmux")
        assert made.exit_code == 0 and folder.startswith(cached.MOUNTED), (folder, made.output)
        agent = Terminus2(
            logs_dir=Path(logs),
            model_name=f"openai/{TERMINUS}",
            api_base=url,
            llm_kwargs={"api_key": "direct"},
            max_turns=10,
            suppress_max_turns_warning=True,
            record_terminal_session=False,
        )
        environment = HarborExec(container)

        async def act() -> None:
            await agent.setup(environment)
            await agent.run(run.instruction, environment, AgentContext())

        start = time.perf_counter()
        asyncio.run(asyncio.wait_for(act(), TIMEOUT_S))
        seconds = time.perf_counter() - start
        assert container.fixed(), container.run("ls -la /app").output
    return max(probe - empty, 0.0), seconds


def beside_terminus(
    client: docker.DockerClient, server: Server, model: ScriptedModel, args: argparse.Namespace
) -> dict[str, list[float]]:
    """terminus-2's runs, direct and as rollouts interleaved, against the scripted model that
    mini-swe-agent's runs use (its script under :data:`TERMINUS`)."""
    rows: dict[str, list[float]] = {"direct": [], "rollout": [], "install": []}
    rollout(server, model.base_url, TERMINUS, "terminus-2")  # warm: Harbor's import, the probe
    terminus_direct(client, args.cache, model.base_url)
    for _ in range(args.reps):
        install, seconds = terminus_direct(client, args.cache, model.base_url)
        rows["install"].append(install)
        rows["direct"].append(seconds)
        rows["rollout"].append(rollout(server, model.base_url, TERMINUS, "terminus-2"))
    return rows


def evaluate(server: Server) -> float:
    with server.client() as env:
        env.reset(task_id=TASK)
        env.exec("printf 'Hello, world!\\n' > hello.txt")
        start = time.perf_counter()
        assert env.evaluate().reward == 1.0
        return time.perf_counter() - start


def inside(
    client: docker.DockerClient, server: Server, name: str, args: argparse.Namespace, folder: Path
) -> dict[str, list[float]]:
    """``name``'s runs, direct and as rollouts interleaved (load drifts hit both alike), against
    one scripted model of its own (so the server's proxy probes its endpoint once)."""
    rows: dict[str, list[float]] = {"direct": [], "rollout": [], "install": []}
    dialect = cached.KINDS[name][0] if name in cached.KINDS else cached.OPENAI
    with contextlib.ExitStack() as stack:
        fix = AIDER_FIX if name == "aider" else FIX
        model = stack.enter_context(DialectModel(fix * (2 * args.reps + 2)))
        if dialect is cached.OPENAI:
            url = model.base_url
        else:  # the proxy speaks the harness's dialect to it
            url, _ = stack.enter_context(capture_proxy(model, require_registered=False))

        def direct_run() -> tuple[float, float]:
            if name == "codex":
                return codex_direct(client, args.codex_package, folder, url)
            return cached_direct(client, name, args.cache, url)

        rollout(server, model.base_url, model.model, name)  # warm: the image, the probe
        direct_run()
        for _ in range(args.reps):
            install, seconds = direct_run()
            rows["install"].append(install)
            rows["direct"].append(seconds)
            rows["rollout"].append(rollout(server, model.base_url, model.model, name))
    return rows


def unfit(args: argparse.Namespace) -> dict[str, str]:
    """Each harness asked for that cannot run here, and why."""
    why = {}
    for name in args.harness:
        if name == "codex" and not (args.codex_package and args.codex_package.is_file()):
            why[name] = f"no codex package at {args.codex_package} (give --codex-package)"
        elif name in cached.KINDS:
            needed = [name, *filter(None, [BUILDS[name].runtime])]
            missing = [n for n in needed if not (args.cache / n / MANIFEST).is_file()]
            if missing:
                fill = f"harbor-openenv harnesses fill {args.cache} {name}"
                why[name] = f"the cache {args.cache} holds no {', '.join(missing)} ({fill})"
        elif name == "terminus-2" and not HAS_HARBOR:
            why[name] = (
                f"{sys.executable} has no Harbor (run the bench with a Python that has the"
                " runtime's harbor extra: .cache/harbor-server-venv/bin/python)"
            )
        elif name == "terminus-2" and not (args.cache / "tmux" / MANIFEST).is_file():
            why[name] = f"the cache {args.cache} holds no tmux (harbor-openenv harnesses fill)"
    return why


def mini_swe_agent(
    server: Server, model: ScriptedModel, args: argparse.Namespace, evaluations: list[float]
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """mini-swe-agent's runs (direct and rollouts interleaved, an evaluate after each), then
    rollouts and direct runs per minute at ``--concurrent``."""
    # one model name, as a trainer has: its endpoint is probed once (the scripted model answers
    # each conversation by its own turn count, so concurrent runs share the name safely)
    name = "bench"
    rollout(server, model.base_url, name)  # warm: the harness's import, the image, the probe
    direct(model, name)
    rows: dict[str, list[float]] = {"direct": [], "rollout": []}
    for _ in range(args.reps):
        rows["direct"].append(direct(model, name))
        rows["rollout"].append(rollout(server, model.base_url, name))
        evaluations.append(evaluate(server))
    throughput = {}
    batch = [name] * (2 * args.concurrent)
    for key, one in (
        ("rollout", lambda n: rollout(server, model.base_url, n)),
        ("direct", lambda n: direct(model, n)),
    ):
        start = time.perf_counter()
        with ThreadPoolExecutor(args.concurrent) as pool:
            list(pool.map(one, batch))
        throughput[key] = len(batch) / (time.perf_counter() - start) * 60
    return rows, throughput


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument(
        "--harness",
        action="append",
        choices=HARNESSES,
        help="(default: all; terminus-2 only under a Python with Harbor)",
    )
    cache = Path.home() / ".cache" / "harbor-openenv" / "harnesses"
    parser.add_argument(
        "--cache", type=Path, default=os.environ.get("HARBOR_OPENENV_HARNESS_CACHE", cache)
    )
    packs = sorted((ROOT / ".cache").glob("openai-codex-*.tgz"))
    package = os.environ.get("HARBOR_OPENENV_CODEX_PACKAGE") or (packs[-1] if packs else None)
    parser.add_argument("--codex-package", type=Path, default=package)
    args = parser.parse_args()
    if not args.harness:
        args.harness = HARNESSES if HAS_HARBOR else HARNESSES[:-1]
        if not HAS_HARBOR:
            print(f"terminus-2 left out: {sys.executable} has no Harbor (see --help)")
    args.cache = Path(args.cache).expanduser()
    for name, reason in unfit(args).items():
        parser.error(f"{name} cannot run: {reason}")
    return args


def main() -> None:
    args = arguments()
    client = docker.from_env(timeout=600)
    client.images.build(
        path=str(TASKS / TASK / "environment"), tag=IMAGE, labels=LABEL, network_mode="none"
    )
    settings = {"HARBOR_OPENENV_MAX_SESSIONS": str(args.concurrent + 2)}
    if "codex" in args.harness:
        settings["HARBOR_OPENENV_CODEX_PACKAGE"] = str(args.codex_package)
    if set(args.harness) & {*cached.KINDS, "terminus-2"}:
        settings["HARBOR_OPENENV_HARNESS_CACHE"] = str(args.cache)
    table: dict[str, dict[str, list[float]]] = {}
    evaluations: list[float] = []
    throughput: dict[str, float] = {}
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-rollout-") as folder,
            ScriptedModel({"bench": SCRIPT, TERMINUS: TERMINUS_SCRIPT}) as model,
            Server(TASKS, **settings) as server,
        ):
            if "codex" in args.harness:  # the volume's codex/ folder, as the server puts it
                machine = client.info()["Architecture"]
                with tarfile.open(codex.Codex(args.codex_package).volume_archive(machine)) as tar:
                    tar.extractall(folder, filter="tar")
            if "mini-swe-agent" in args.harness:
                table["mini-swe-agent"], throughput = mini_swe_agent(
                    server, model, args, evaluations
                )
            for name in args.harness:
                if name not in ("mini-swe-agent", "terminus-2"):
                    table[name] = inside(client, server, name, args, Path(folder))
                    evaluations.append(evaluate(server))
            if "terminus-2" in args.harness:
                table["terminus-2"] = beside_terminus(client, server, model, args)
                evaluations.append(evaluate(server))
    finally:
        for container in client.containers.list(
            all=True, filters={"label": "harbor-openenv-bench"}
        ):
            with contextlib.suppress(docker.errors.NotFound):  # --rm may be removing it
                container.remove(force=True)
        client.images.remove(IMAGE, force=True)
    report(args, table, statistics.median(evaluations), throughput)


def report(
    args: argparse.Namespace,
    table: dict[str, dict[str, list[float]]],
    grading: float,
    throughput: dict[str, float],
) -> None:
    print(f"load average {os.getloadavg()[0]:.1f}; {args.reps} reps on {TASK}; medians in s")
    print(f"evaluate alone (the grading a rollout does): {grading:.2f} s")
    print(
        f"{'harness':<16}{'direct':>7}{'rollout':>9}{'ratio':>7}"
        f"{'w/o grading':>13}{'ratio':>7}{'install':>9}{'w/o both':>10}"
    )
    for name, rows in table.items():
        run, alone = statistics.median(rows["rollout"]), statistics.median(rows["direct"])
        bare = run - grading
        install = statistics.median(rows["install"]) if rows.get("install") else None
        # the install is timed on its own (the direct run has none): the rest is the relay's,
        # the capture's and the server's
        rest = f"{(bare - install) / alone:>9.2f}x" if install is not None else f"{'-':>10}"
        print(
            f"{name:<16}{alone:>7.2f}{run:>9.2f}{run / alone:>6.2f}x"
            f"{bare:>13.2f}{bare / alone:>6.2f}x"
            f"{'-' if install is None else f'{install:.3f}':>9}{rest}"
        )
    print(
        "goals: a rollout without its grading <= 1.1x direct; a per-episode install <= 0.3 s"
        " (w/o both: the rollout less its grading and its install, which the direct run has not)"
    )
    if throughput:
        print(
            f"mini-swe-agent, {args.concurrent} concurrent: {throughput['rollout']:.1f}"
            f" rollouts/min (direct runs: {throughput['direct']:.1f}/min)"
        )


if __name__ == "__main__":
    main()
