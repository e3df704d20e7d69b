"""mini-swe-agent beside the container: its own agent loop (``DefaultAgent``, the tool-calling
``mini.yaml`` config) and model class (``LitellmModel``, pointed at the capture proxy), with an
environment whose ``execute`` runs each command through the episode's sandbox, as the agent's user
in the working directory. Needs the ``harness`` extra (``harbor-openenv[harness]``).

Nothing of the server's reaches the harness: its model key is the rollout's capture session id,
its template variables are the container's ``uname``, not the server's environment, and its
commands run in the container (whose network the task decides; a task's ``network none``
container cannot reach the proxy or the server)."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Literal

from harbor_openenv.harness.base import HarnessResult, HarnessRun

_LOG_TAIL = 4000


def _import_mini() -> Any:
    """Import mini-swe-agent quietly: no banner, no user config folder, no litellm download."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", tempfile.mkdtemp(prefix="harbor-mswea-"))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        from minisweagent.agents import default
        from minisweagent.config import get_config_from_spec
        from minisweagent.environments import local
        from minisweagent.models import litellm_model
    except ImportError as exc:
        raise ImportError(
            f"the mini-swe-agent harness needs pip install 'harbor-openenv[harness]' ({exc})"
        ) from exc
    import litellm

    litellm.suppress_debug_info = True  # no "Provider List" printed per uncosted call
    return default, local, litellm_model, get_config_from_spec("mini")


class MiniSweAgent:
    """mini-swe-agent (PyPI ``mini-swe-agent``), run in the server's process."""

    name = "mini-swe-agent"
    where: Literal["beside", "inside"] = "beside"

    def run(self, run: HarnessRun) -> HarnessResult:
        default, local, litellm_model, config = _import_mini()
        deadline = time.monotonic() + run.budget.timeout_s
        environment = _sandbox_environment(local.LocalEnvironment, run, deadline, config)
        model = litellm_model.LitellmModel(
            model_name=f"openai/{run.model.model}",
            model_kwargs={
                **config["model"].get("model_kwargs", {}),
                "api_base": run.model.base_url,
                "api_key": run.model.api_key,
            },
            cost_tracking="ignore_errors",
            observation_template=config["model"]["observation_template"],
            format_error_template=config["model"]["format_error_template"],
        )
        # A failed model call ends the rollout (the trainer retries it) instead of being retried
        # ten times over minutes.
        model.abort_exceptions = [Exception]
        agent_config = {k: v for k, v in config["agent"].items() if k != "mode"}
        agent = default.DefaultAgent(
            model,
            environment,
            **{
                **agent_config,
                "step_limit": run.budget.max_turns,
                "cost_limit": 0,
                "wall_time_limit_seconds": max(1, int(run.budget.timeout_s)),
            },
        )
        try:
            ended = agent.run(run.instruction)
        except Exception as exc:
            return HarnessResult("crashed", f"{type(exc).__name__}: {exc}", _log(agent))
        status = str(ended.get("exit_status", ""))
        if status == "TimeExceeded" or time.monotonic() > deadline:
            return HarnessResult("timeout", "the harness ran out of time", _log(agent))
        if status == "LimitsExceeded":
            return HarnessResult("turn_limit", None, _log(agent))
        return HarnessResult("completed", None, _log(agent))


def _sandbox_environment(base: type, run: HarnessRun, deadline: float, config: Any) -> Any:
    """An instance of mini-swe-agent's LocalEnvironment whose commands run in the sandbox."""
    sandbox, env = run.sandbox, dict(config["environment"].get("env", {}))
    probe = sandbox.exec(
        "uname -s; uname -r; uname -v; uname -m",
        timeout_s=30,
        max_output=4096,
        user=run.user,
        channel=run.channel,
    )
    system, release, version, machine = [*probe.output.splitlines(), "", "", "", ""][:4]
    uname = {"system": system, "release": release, "version": version, "machine": machine}

    class SandboxEnvironment(base):
        def execute(
            self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None
        ) -> dict[str, Any]:
            remaining = deadline - time.monotonic()
            limit = min(float(timeout or self.config.timeout), remaining)
            if limit <= 0:
                output: dict[str, Any] = {
                    "output": "",
                    "returncode": -1,
                    "exception_info": "the rollout's time budget is spent",
                }
            else:
                result = sandbox.exec(
                    str(action.get("command", "")),
                    timeout_s=limit,
                    max_output=1 << 20,
                    user=run.user,
                    env=env,
                    workdir=cwd or run.workdir,
                    channel=run.channel,
                )
                output = {
                    "output": result.output,
                    "returncode": result.exit_code,
                    "exception_info": f"timed out after {limit:.0f} s" if result.timed_out else "",
                }
            self._check_finished(output)
            return output

        def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
            return {**self.config.model_dump(), **uname, **kwargs}

    return SandboxEnvironment(timeout=int(run.budget.timeout_s) + 1)


def _log(agent: Any) -> str:
    """The tail of the harness's own transcript (untrusted, for diagnosis only)."""
    lines = [f"{m.get('role')}: {str(m.get('content'))[:400]}" for m in agent.messages[-8:]]
    return "\n".join(lines)[-_LOG_TAIL:]
