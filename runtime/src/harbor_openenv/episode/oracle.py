"""The oracle: run the task's (or the current step's) solution/solve.sh in the episode."""

from __future__ import annotations

from harbor_openenv.episode.episode import ActionError, Episode
from harbor_openenv.episode.verifier import TAIL, tail_of
from harbor_openenv.models import HarborAction, HarborObservation
from harbor_openenv.sandbox import SandboxError

_LOG = "/logs/agent/oracle.txt"


def solve(episode: Episode, action: HarborAction) -> HarborObservation:
    """Stop the agent's processes, stage the (step's) solution/ to /solution, run solve.sh as
    the agent's user within the agent's timeout, then remove /solution."""
    task, step, sandbox = episode.task, episode.step, episode.sandbox
    solution = task.oracle_dir(step)
    if not (solution / "solve.sh").is_file():
        raise ActionError(f"{task.where(solution)}/solve.sh: missing")
    # No agent process may watch /solution: stop them all first, as evaluate does.
    sandbox.stop_processes()
    sandbox.put_dir(solution, "/solution", executable="solve.sh")
    timeout = episode.agent_timeout or episode.runtime.settings.solve_timeout_s
    run = sandbox.exec(
        f"(/solution/solve.sh) > {_LOG} 2>&1",
        timeout_s=timeout,
        max_output=TAIL,
        user=episode.agent_user,
        env={"DEBIAN_FRONTEND": "noninteractive", **episode.envs.solution},
    )
    removed = sandbox.exec_root("rm -rf /solution")
    if removed.exit_code != 0:
        raise SandboxError(f"cannot remove /solution: {removed.output.strip()}")
    return episode.observe(
        "solve",
        output=tail_of(sandbox, _LOG),
        exit_code=run.exit_code,
        timed_out=run.timed_out,
        error=f"solve.sh timed out after {timeout:g} s" if run.timed_out else None,
    )
