"""An inside harness from the harness cache, run as Harbor's own agent class runs it.

What Harbor's class (``harbor.agents.installed.*``) knows, its command lines, environment
variables, config files and flags, is replayed from ``harbor_agents.json``: the commands its
``run()`` executes, recorded against Harbor 0.25 by ``scripts/harbor-agents.py`` (the runtime
never imports Harbor, which needs Python 3.12; tests/deploy/test_harbor_agents.py checks the
table against the installed Harbor). Only its install step is replaced: the harness's build is
already in the container, read-only, from the cache (:mod:`.cache`).

The model's port is relayed to a :class:`.keyed_port.KeyedPort`: the harness is given the
relayed URL in its dialect's form and a placeholder key, which the keyed port replaces with the
session's on the server's side. Then Harbor's commands run, as the agent, through the exec channel
where the server has it on. The first one's shell first probes the container, in the same exec:
its architecture and C library (musl's loader, else glibc's) pick the build, whose shared
libraries the image's own loader must resolve (``ld.so --list``); an image that cannot run it
fails there with one line saying why, before Harbor's command starts.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal
from urllib.parse import urlsplit

from harbor_openenv.config import Settings
from harbor_openenv.sandbox.errors import SandboxError
from harbor_openenv.sandbox.result import ExecResult

from .base import HarnessError, HarnessResult, HarnessRun
from .cache import BUILDS, MANIFEST, MOUNTED, Build
from .keyed_port import KeyedPort, target_of

PORT = 4181  # the relayed port inside the container
LOG_BYTES = 64 << 10  # the tail of the harness's output a result keeps
INSTRUCTION = "HARBOR_OPENENV_INSTRUCTION"  # the variable a command line takes it from
FILE = "HARBOR_OPENENV_FILE"  # the variable an uploaded config file's text is written from
# An agent user without a writable home (nobody's /nonexistent) gets one beside Harbor's logs,
# where the config files Harbor's commands write (opencode's ~/.config/opencode) can go.
HOME = '[ -w "$HOME" ] || { export HOME=/logs/agent/home; mkdir -p "$HOME"; }'
# A model name a recorded command line may hold as it is (in a quoted config, a --model flag).
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")
_TABLE = "harbor_agents.json"
UNFIT = "harbor-openenv: unfit: "

# Finds the build for the container (as the agent): $1 the harness's folder, $2 its entry, and what
# must load in the image: $3 the folder of its runtime (node; else $1) and $4 that one's entry
# (else $2). Prints the platform folder, or one line saying why the image cannot run it (exit 3).
# Run by the first command's shell, so it costs no exec of its own (probe_line); UNFIT starts
# the line of an image that cannot run the build.
PROBE = r"""
m=$(uname -m)
case $m in
  x86_64) a=x64 g=/lib64/ld-linux-x86-64.so.2 ;;
  aarch64) a=arm64 g=/lib/ld-linux-aarch64.so.1 ;;
  *) echo "no harness builds for the container's architecture $m"; exit 3 ;;
esac
if [ -e "$g" ]; then p=linux-$a l=$g libc=glibc
elif [ -e "/lib/ld-musl-$m.so.1" ]; then p=linux-$a-musl l=/lib/ld-musl-$m.so.1 libc=musl
else echo "the image has no C library loader (neither glibc's $g nor musl's)"; exit 3
fi
if [ ! -d "$1" ]; then
  echo "the harness cache is not in this container (the server's HARBOR_OPENENV_HARNESS_CACHE)"
  exit 3
fi
b="$1/$p/$2" x="${3:-$1}/$p/${4:-$2}"
if [ ! -x "$b" ] || [ ! -x "$x" ]; then
  echo "the harness cache holds no $p build for this $libc image"; exit 3
fi
if ! out=$("$l" --list "$x" 2>&1); then
  why=$(echo "$out" | grep -v '=> /' | tr '\n' ' ')
  echo "its $p build${3:+ of $(basename "$3")} cannot load in this image: $why"
  exit 3
fi
echo "$1/$p"
"""
# The probe of a portable build (aider: its own loader and C library in the folder), which any
# Linux image of its architecture runs: $1 the harness's folder, $2 its entry.
PORTABLE_PROBE = r"""
m=$(uname -m)
case $m in
  x86_64) p=linux-x64 ;;
  aarch64) p=linux-arm64 ;;
  *) echo "no harness builds for the container's architecture $m"; exit 3 ;;
esac
if [ ! -d "$1" ]; then
  echo "the harness cache is not in this container (the server's HARBOR_OPENENV_HARNESS_CACHE)"
  exit 3
fi
if [ ! -x "$1/$p/$2" ]; then echo "the harness cache holds no $p build"; exit 3; fi
echo "$1/$p"
"""
# What Harbor's aider command sources first: the env file its installer writes, which puts aider
# on PATH. The cache's build is on PATH already, and there is no such file: the line goes.
INSTALLER_ENV = ". $HOME/.local/bin/env; "


def agent_table() -> dict[str, Any]:
    """The recorded table of Harbor's agents (see the module's docstring)."""
    text = (resources.files(__package__) / _TABLE).read_text()
    table: dict[str, Any] = json.loads(text)
    return table


@dataclass(frozen=True)
class Dialect:
    """How a harness names its model's endpoint: the relayed URL's path (``/v1`` for OpenAI's
    APIs, none for Anthropic's and Google's, whose clients add their own)."""

    name: Literal["anthropic", "openai", "google"]
    path: str


ANTHROPIC = Dialect("anthropic", "")
GOOGLE = Dialect("google", "")
OPENAI = Dialect("openai", "/v1")


class CachedHarness:
    """A harness of the cache, run as Harbor's class runs it; ``failure`` reads the error it
    reported out of its output, if any."""

    where: Literal["beside", "inside"] = "inside"

    def __init__(
        self,
        build: Build,
        dialect: Dialect,
        failure: Callable[[str], str | None],
        *,
        port: int = PORT,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = build.name
        self.build, self.dialect, self._failure, self.port = build, dialect, failure, port
        self.env = env or {}
        table = agent_table()
        self.placeholders: dict[str, str] = table["placeholders"]
        self.steps: list[dict[str, Any]] = table["agents"][build.name]

    def run(self, run: HarnessRun) -> HarnessResult:
        """Relay the model's port and run Harbor's commands in order, the first after the probe
        that finds the build, until one fails or the budget's time is up."""
        sandbox = run.sandbox
        deadline = time.monotonic() + run.budget.timeout_s
        try:
            with (
                KeyedPort(target_of(run.model.base_url), run.model.api_key) as target,
                sandbox.relay(self.port, target),
            ):
                output, folder = "", None
                for step in self.steps:
                    command, env = self.shell(step, run)
                    path = f'export PATH="{folder}/bin:$PATH"' if folder else self.probe_line()
                    result = sandbox.exec(
                        f"{path}; {HOME}; {command}",
                        env=env,
                        user=run.user,
                        workdir=run.workdir,
                        timeout_s=max(deadline - time.monotonic(), 0.0),
                        max_output=16 << 20,
                        channel=run.channel,
                    )
                    if folder is None and not result.timed_out:
                        folder, result = self.found(result)
                    output += result.output
                    if result.timed_out or result.exit_code != 0:
                        break
        except (HarnessError, SandboxError) as exc:
            return HarnessResult("crashed", error=str(exc))
        log = output[-LOG_BYTES:]
        if result.timed_out:
            error = f"{self.name} ran past its {run.budget.timeout_s:g} s"
            return HarnessResult("timeout", error=error, log=log)
        failure = self._failure(output)
        if result.exit_code == 0 and failure is None:
            return HarnessResult("completed", log=log)
        error = failure or f"{self.name} exited with code {result.exit_code}"
        last = next((line for line in reversed(output.splitlines()) if line.strip()), "")
        if last and last not in error:  # the harness's own last word says why, most often
            error += f" (its output ends: {textwrap.shorten(last, 300)})"
        return HarnessResult("crashed", error=error, log=log)

    def probe_line(self) -> str:
        """The shell line before the first command, as the agent: :data:`PROBE` finds the build
        the container runs, prints its folder as the output's first line and puts its ``bin``
        on PATH; one the image cannot run prints :data:`UNFIT` and why, and exits 3."""
        probe = PORTABLE_PROBE if self.build.pypi else PROBE
        return (
            f"_probe() {{ {probe}\n}}; f=$(_probe {shlex.join(self.probe_args())})"
            f' || {{ echo "{UNFIT}$f"; exit 3; }}; echo "$f"; export PATH="$f/bin:$PATH"'
        )

    def probe_args(self, root: str = MOUNTED) -> list[str]:
        """:data:`PROBE`'s arguments for the cache at ``root`` in the container."""
        runtime = BUILDS[self.build.runtime] if self.build.runtime else None
        args = [f"{root}/{self.name}", self.build.entry]
        if self.build.pypi:
            return args
        return args + ([f"{root}/{runtime.name}", runtime.entry] if runtime else [])

    def found(self, result: ExecResult) -> tuple[str, ExecResult]:
        """The build's folder the first command's probe printed, and that command's result
        without it; raises :class:`HarnessError` with the probe's reason when the image cannot
        run the build."""
        first, _, rest = result.output.partition("\n")
        if first.startswith(UNFIT):
            reason = first.removeprefix(UNFIT).strip() or f"the probe ended {result.exit_code}"
            raise HarnessError(f"{self.name} cannot run in this container: {reason}")
        if not first.startswith(f"{MOUNTED}/"):
            raise HarnessError(f"{self.name}'s probe printed no folder: {first[:200]!r}")
        return first, dataclasses.replace(result, output=rest, raw=None)

    def locate(self, run: HarnessRun) -> str:
        """The probe on its own, one exec as the agent (what the first command runs first): the
        build's folder, or :class:`HarnessError` with why the image cannot run it."""
        found = run.sandbox.exec(
            self.probe_line(),
            user=run.user,
            workdir=run.workdir,
            timeout_s=60,
            max_output=1 << 16,
        )
        return self.found(found)[0]

    def relayed_url(self, run: HarnessRun) -> str:
        """The model's base URL inside the container, in the dialect's form."""
        path = urlsplit(run.model.base_url).path.rstrip("/") if self.dialect.path else ""
        return f"http://127.0.0.1:{self.port}{path}"

    def shell(self, step: dict[str, Any], run: HarnessRun) -> tuple[str, dict[str, str]]:
        """A recorded step as a command line and its environment: a command as Harbor ran it,
        or a config file Harbor's class uploaded (pi's models.json), written by the agent's user
        from :data:`FILE` with the relayed URL and the model's name in it."""
        if "upload" not in step:
            return self.command(step["command"], run), self.environment(step["env"], run)
        path = shlex.quote(step["upload"])
        values = {self.placeholders["base_url"]: self.relayed_url(run)}
        values[self.placeholders["model"]] = self._model_name(run)
        command = f'mkdir -p "$(dirname {path})" && printf %s "${FILE}" > {path}'
        return command, {FILE: _replace(step["content"], values)}

    def environment(self, env: dict[str, str], run: HarnessRun) -> dict[str, str]:
        """A step's environment as Harbor set it, its placeholders replaced: the model's name,
        the relayed URL and the instruction, also inside a value (aider's model settings, JSON,
        hold the URL); the key stays a placeholder: the keyed port sets the real one outside the
        container. The instruction is also in :data:`INSTRUCTION`, and the harness's own
        settings (:data:`SETTINGS`) are added."""
        values = {
            self.placeholders["model"]: run.model.model,
            self.placeholders["base_url"]: self.relayed_url(run),
            self.placeholders["instruction"]: run.instruction,
        }
        replaced = {name: _replace(value, values) for name, value in env.items()}
        return {**replaced, **self.env, INSTRUCTION: run.instruction}

    def command(self, command: str, run: HarnessRun) -> str:
        """A step's command line with its placeholders replaced (opencode's has them in the
        config it writes and in its arguments): the relayed URL, the model's name (one that
        needs no shell quoting) and the instruction as one word from :data:`INSTRUCTION`; the
        line that sources an installer's env file (:data:`INSTALLER_ENV`) goes."""
        command = command.replace(INSTALLER_ENV, "")
        values = {
            self.placeholders["base_url"]: self.relayed_url(run),
            self.placeholders["instruction"]: f'"${INSTRUCTION}"',
        }
        if self.placeholders["model"] in command:
            values[self.placeholders["model"]] = self._model_name(run)
        return _replace(command, values)

    def _model_name(self, run: HarnessRun) -> str:
        """The model's name, as a command line or a config file holds it unquoted."""
        if not _MODEL_NAME.fullmatch(run.model.model):
            raise HarnessError(
                f"{self.name} takes the model's name on its command line: {run.model.model!r}"
                " has characters other than letters, digits and ._:/@+-"
            )
        return run.model.model


def _replace(text: str, values: dict[str, str]) -> str:
    """``text`` with each key of ``values`` replaced, in one pass: a value is never searched for
    placeholders again."""
    pattern = "|".join(re.escape(p) for p in sorted(values, key=len, reverse=True))
    return re.sub(pattern, lambda found: values[found.group()], text)


def claude_failure(output: str) -> str | None:
    """The error Claude Code's ``stream-json`` result reported, if it did."""
    for event in reversed(_json_lines(output)):
        if event.get("type") == "result":
            if event.get("is_error"):
                return str(event.get("result") or event.get("subtype") or "an error")
            return None
    return "claude-code reported no result"


def exit_code_failure(output: str) -> None:
    """For a harness that reports its errors by its exit code alone (Harbor's command pipes it
    through ``tee`` under ``pipefail``): nothing in the output to read."""
    return None


def opencode_failure(output: str) -> str | None:
    """The errors opencode's ``--format=json`` events reported (as Harbor's class reads them),
    or that it reported no event at all."""
    events = [event for event in _json_lines(output) if "type" in event]
    if not events:
        return "opencode reported no event"
    messages = []
    for event in events:
        if event["type"] == "error":
            error = event.get("error")
            data = error.get("data") if isinstance(error, dict) else None
            message = data.get("message") if isinstance(data, dict) else None
            name = error.get("name") if isinstance(error, dict) else None
            messages.append(str(message or name or error))
    return "; ".join(messages[:3]) or None


def pi_failure(output: str) -> str | None:
    """The errors pi's ``--mode json`` events reported (an assistant message that stopped on an
    error names it), or that it reported no event at all."""
    events = [event for event in _json_lines(output) if "type" in event]
    if not events:
        return "pi reported no event"
    messages = [
        str(message.get("errorMessage") or "an error")
        for event in events
        if event["type"] == "message_end"
        and isinstance(message := event.get("message"), dict)
        and message.get("stopReason") == "error"
    ]
    return "; ".join(dict.fromkeys(messages[:3])) or None


def aider_failure(output: str) -> str | None:
    """The model errors aider printed (LiteLLM's exceptions, each named ``litellm.<Name>``):
    aider reports them and still exits 0."""
    errors = [line.strip() for line in output.splitlines() if _LITELLM_ERROR.search(line)]
    return "; ".join(dict.fromkeys(errors[:3])) or None


_LITELLM_ERROR = re.compile(r"\blitellm\.\w+(Error|Exception)\b")


def _json_lines(output: str) -> list[dict[str, Any]]:
    """The lines of ``output`` that are JSON objects."""
    found = []
    for line in output.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            found.append(event)
    return found


# The cache's harnesses: each one's dialect (the capture proxy's matching one) and how its
# output reports an error.
KINDS: dict[str, tuple[Dialect, Callable[[str], str | None]]] = {
    "claude-code": (ANTHROPIC, claude_failure),  # Anthropic Messages
    "gemini-cli": (GOOGLE, exit_code_failure),  # Google's generateContent
    "qwen-code": (OPENAI, exit_code_failure),  # OpenAI chat completions
    "opencode": (OPENAI, opencode_failure),  # OpenAI chat (its openai-compatible provider)
    "pi": (OPENAI, pi_failure),  # OpenAI chat (the custom provider of its models.json)
    "aider": (OPENAI, aider_failure),  # OpenAI chat (LiteLLM's openai/ provider)
}
# Settings a harness takes from its environment, beside Harbor's: aider's calls home (its update
# check, its analytics, which it may ask to turn on and --yes would accept) stay off, as a
# no-network container would make them fail.
SETTINGS: dict[str, dict[str, str]] = {
    "aider": {"AIDER_CHECK_UPDATE": "false", "AIDER_ANALYTICS_DISABLE": "true"},
}


def from_settings(name: str, settings: Settings) -> CachedHarness:
    """The harness ``name``, when the server's harness cache holds it."""
    root = settings.harness_cache
    if root is None:
        variable = Settings.variable("harness_cache")
        raise HarnessError(f"{variable} is not set (harbor-openenv harnesses fill DIR {name})")
    runtime = BUILDS[name].runtime
    for needed in (name, *((runtime,) if runtime else ())):
        if not (root / needed / MANIFEST).is_file():
            fill = f"harbor-openenv harnesses fill {root} {name}"
            raise HarnessError(f"the harness cache {root} holds no {needed} ({fill})")
    dialect, failure = KINDS[name]
    return CachedHarness(BUILDS[name], dialect, failure, env=SETTINGS.get(name))
