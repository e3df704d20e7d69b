"""terminus-2, Harbor's own agent, beside the container: Harbor's ``Terminus2`` class itself (its
prompt, JSON parser, turn loop, summarization and ``TmuxSession``), its model calls OpenAI chat
through LiteLLM pointed at the capture proxy, driving a tmux session in the task container
through :class:`SandboxEnvironment`, the part of Harbor's ``BaseEnvironment`` that Terminus2 uses
(``exec``), over the episode's sandbox. Needs Python >= 3.12 and the ``harbor`` extra.

Only the install step is replaced: Harbor's TmuxSession installs tmux with the image's package
manager (the network); here tmux is a portable build (:mod:`.portable`), the same for every
image, from the harness cache (``harbor-openenv harnesses fill CACHE tmux``): mounted read-only
from the helper's volume, or uploaded read-only where there is no such volume. Its absolute path
is in the completion signal the pane runs (a login shell resets ``PATH``), and on ``PATH`` for
the commands Terminus2 runs through ``exec``. No terminal recording (asciinema is not there either).

Every command runs as the agent's user: a ``user="root"`` asked by Harbor's code (its install
probes) is not granted. The model key is the rollout's capture session id; nothing of the
server's environment reaches the container (tmux's environment is the exec's).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import tarfile
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Literal

from harbor_openenv.config import Settings
from harbor_openenv.sandbox.errors import SandboxError

from .base import HarnessError, HarnessResult, HarnessRun
from .cache import MOUNTED
from .portable import PLATFORMS

HOME = "/opt/harbor-openenv/tmux"  # in the container: bin/tmux, lib/, libexec/tmux (root's, 0755)
NEEDS = ("bash", "timeout", "base64", "cat", "rm")  # what Harbor's TmuxSession runs in the image
_LOG_TAIL = 4000


def _import_terminus() -> Any:
    """Harbor's Terminus2 and TmuxSession, quietly (no LiteLLM cost-map download)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        from harbor.agents.terminus_2 import terminus_2, tmux_session
        from harbor.models.agent.context import AgentContext
    except ImportError as exc:
        raise ImportError(
            "the terminus-2 harness needs Python >= 3.12 and pip install"
            f" 'harbor-openenv[harbor]' ({exc})"
        ) from exc
    return terminus_2.Terminus2, tmux_session.TmuxSession, AgentContext


class SandboxEnvironment:
    """What Terminus2 and its TmuxSession call of a Harbor ``BaseEnvironment`` (``exec``,
    ``default_user``, ``session_id``), over the episode's sandbox, as the agent's user."""

    def __init__(self, run: HarnessRun, tmux: str) -> None:
        self._run = run
        self._path = f'export PATH={shlex.quote(tmux + "/bin")}:"$PATH"; '
        self.default_user: str | None = None  # every command is the agent's (run.user) anyway
        self.session_id = "terminus-2"

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> Any:
        """Harbor's exec: ``command`` in the container as the agent's user (``user`` is not
        honoured: no root for the harness), its output as stdout (and stderr, when it failed)."""
        from harbor.environments.base import ExecResult

        run = self._run
        result = await asyncio.to_thread(
            run.sandbox.exec,
            self._path + command,
            timeout_s=float(timeout_sec or run.budget.timeout_s),
            max_output=1 << 20,
            user=run.user,
            env=env,
            workdir=cwd or run.workdir,
            channel=run.channel,
        )
        code = 124 if result.exit_code is None else result.exit_code
        return ExecResult(
            stdout=result.output, stderr=result.output if code else None, return_code=code
        )

    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        result = await self.exec(f"test -d {shlex.quote(path)}")
        return bool(result.return_code == 0)


class Terminus:
    """terminus-2 (Harbor's ``Terminus2``), run in the server's process; tmux from ``tmux``,
    a folder holding ``<platform>/bin/tmux`` portable builds (:func:`.portable.fill_tmux`)."""

    name = "terminus-2"
    where: Literal["beside", "inside"] = "beside"

    def __init__(self, tmux: Path) -> None:
        self.tmux = tmux
        self._archives: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._scratch = tempfile.mkdtemp(prefix="harbor-openenv-tmux-")
        weakref.finalize(self, shutil.rmtree, self._scratch, ignore_errors=True)

    @classmethod
    def from_settings(cls, settings: Settings) -> Terminus:
        """The harness with the tmux of the server's ``HARBOR_OPENENV_HARNESS_CACHE``."""
        if settings.harness_cache is None:
            raise HarnessError(
                "HARBOR_OPENENV_HARNESS_CACHE is not set (terminus-2 takes tmux from it)"
            )
        return cls(settings.harness_cache / "tmux")

    def run(self, run: HarnessRun) -> HarnessResult:
        terminus2, tmux_session, agent_context = _import_terminus()
        try:
            tmux = self.install(run)
        except (HarnessError, SandboxError) as exc:
            return HarnessResult("crashed", str(exc))
        with tempfile.TemporaryDirectory(prefix="harbor-openenv-terminus-") as logs:
            agent = _agent(terminus2, tmux_session, tmux, run, Path(logs))
            context = agent_context()
            try:
                asyncio.run(_act(agent, run, SandboxEnvironment(run, tmux), context))
            except TimeoutError:
                return HarnessResult("timeout", "the harness ran out of time", _log(agent))
            except Exception as exc:
                return HarnessResult("crashed", f"{type(exc).__name__}: {exc}", _log(agent))
        if (context.metadata or {}).get("n_episodes", 0) >= run.budget.max_turns:
            return HarnessResult("turn_limit", None, _log(agent))
        return HarnessResult("completed", None, _log(agent))

    def install(self, run: HarnessRun) -> str:
        """tmux's folder in the container, after checking that the image has what Harbor's
        TmuxSession runs besides tmux: the harness cache's, where the helper's volume holds it
        (read-only, nothing uploaded), else :data:`HOME`, where the portable build for the
        container's architecture is uploaded (root's, read-only to the agent). The probe is one
        command as the agent's user, through the exec channel where the server has it on (as
        Terminus2's own commands go): nothing in the image runs as root for it, and what it
        answers the agent could have written anyway (it then only misleads its own harness)."""
        needs = " ".join(NEEDS)
        probe = run.sandbox.exec(
            f"uname -m; for p in {needs}; do command -v $p >/dev/null || echo missing $p; done;"
            f' for t in {MOUNTED}/tmux/*/bin/tmux; do [ -x "$t" ] && echo "tmux $t"; done',
            timeout_s=60,
            max_output=1 << 16,
            user=run.user,
            workdir="/",
            channel=run.channel,
        )
        machine, *lines = probe.output.strip().splitlines() or ["?"]
        if machine not in PLATFORMS:  # the agent's answer: never a path on the server's host
            raise HarnessError(f"terminus-2 has no tmux for the container's {machine[:80]!r}")
        missing = [line.split()[-1] for line in lines if line.startswith("missing ")]
        if missing:
            raise HarnessError(
                f"terminus-2 needs {needs} in the image; it has no {', '.join(missing)}"
            )
        mounted = f"{MOUNTED}/tmux/{PLATFORMS[machine]}"
        if f"tmux {mounted}/bin/tmux" in lines:
            return mounted
        with open(self._archive(machine), "rb") as archive:
            run.sandbox.import_archive(HOME, archive)
        return HOME

    def _archive(self, machine: str) -> Path:
        """The tar of the portable tmux for ``machine``, made once."""
        with self._lock:
            if machine not in self._archives:
                folder = self.tmux / PLATFORMS[machine]
                if not (folder / "bin" / "tmux").is_file():
                    raise HarnessError(
                        f"no tmux for the container's {machine!r} in {self.tmux}"
                        " (fill it: harbor-openenv harnesses fill)"
                    )
                target = Path(self._scratch) / f"tmux-{machine}.tar"
                with tarfile.open(target, "w") as tar:
                    tar.add(folder, arcname=".", filter=_root_owned)
                self._archives[machine] = target
            return self._archives[machine]


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = (info.mode & 0o755) | (0o755 if info.isdir() else 0)
    return info


def _agent(terminus2: Any, tmux_session: Any, tmux: str, run: HarnessRun, logs: Path) -> Any:
    """Harbor's Terminus2 with the model at the capture proxy, its turns capped, and its
    TmuxSession's install step replaced by the uploaded tmux."""

    class CachedTmux(tmux_session):
        _TMUX_COMPLETION_COMMAND = f"; {tmux}/bin/tmux wait -S done"

        async def _attempt_tmux_installation(self) -> None:
            """Nothing to install: tmux is uploaded, and on ``PATH`` for exec."""

    class Agent(terminus2):
        async def setup(self, environment: Any) -> None:
            self._session = CachedTmux(
                session_name=self.name(),
                environment=environment,
                logging_path="/dev/null",
                local_asciinema_recording_path=None,
                remote_asciinema_recording_path=None,
                pane_width=self.options.tmux_pane_width,
                pane_height=self.options.tmux_pane_height,
                extra_env=self._extra_env,
                user=environment.default_user,
            )
            await self._session.start()

    return Agent(
        logs_dir=logs,
        model_name=f"openai/{run.model.model}",
        api_base=run.model.base_url,
        llm_kwargs={"api_key": run.model.api_key},
        max_turns=run.budget.max_turns,
        suppress_max_turns_warning=True,
        record_terminal_session=False,
    )


async def _act(agent: Any, run: HarnessRun, environment: SandboxEnvironment, context: Any) -> None:
    async def act() -> None:
        await agent.setup(environment)
        await agent.run(run.instruction, environment, context)

    await asyncio.wait_for(act(), timeout=max(run.budget.timeout_s, 1.0))


def _log(agent: Any) -> str:
    """The tail of the agent's chat (untrusted, for diagnosis only)."""
    chat = getattr(agent, "_chat", None)
    messages = chat.messages if chat is not None else []
    lines = [f"{m.get('role')}: {str(m.get('content'))[:400]}" for m in messages[-6:]]
    return "\n".join(lines)[-_LOG_TAIL:]
