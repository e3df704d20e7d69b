"""One episode: a task running in its sandbox, from a successful reset until it ends.

An :class:`Episode` exists only once its environment is up, so its task and sandbox are never
None. It holds what the episode's steps need (the resolved env tables, the current ``[[steps]]``
entry and each finished step's result), prepares each step, grades the current one and, at its
end, hands its sandbox back to the runtime.
"""

from __future__ import annotations

import copy
import functools
import logging
from concurrent.futures import Future
from typing import Any

from harbor_openenv.backends.base import On
from harbor_openenv.backends.fleet import Lease
from harbor_openenv.backends.request import EnvRequest, disk_limit
from harbor_openenv.episode import tamper
from harbor_openenv.episode.branches import branch_start, started, unused
from harbor_openenv.episode.fork import ForkPoint, merge_changes
from harbor_openenv.episode.grading import Shared
from harbor_openenv.episode.pristine import Pristine
from harbor_openenv.episode.record import EpisodeRecord
from harbor_openenv.episode.runtime import Runtime
from harbor_openenv.episode.strategies import GradingEnvironments
from harbor_openenv.episode.verdict import Outcome, Verdict, steps_outcome
from harbor_openenv.episode.verifier import TAIL, TESTS_DIR, Verifier
from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.helper import contract
from harbor_openenv.images.reach import GUESSED, Reach
from harbor_openenv.models import HarborObservation
from harbor_openenv.sandbox import Sandbox, SandboxError
from harbor_openenv.sandbox.owner import LABEL, LABEL_FORK, LABEL_OWNER
from harbor_openenv.tasks.config import StepConfig
from harbor_openenv.tasks.env_vars import Envs, resolve_envs
from harbor_openenv.tasks.reward import VERIFIER_DIR, Failure
from harbor_openenv.tasks.steps import gate
from harbor_openenv.tasks.task import Task

log = logging.getLogger("harbor_openenv")


class ActionError(HarborOpenEnvError):
    """The action cannot run as asked: it is answered with this error and the episode goes on."""


class Episode:
    """A task in its sandbox, and where its ``[[steps]]`` stand."""

    def __init__(
        self,
        runtime: Runtime,
        task: Task,
        sandbox: Sandbox,
        envs: Envs,
        image: str,
        lease: Lease[Any] | None = None,
    ):
        self.runtime, self.task, self.sandbox, self.envs, self.image = (
            runtime,
            task,
            sandbox,
            envs,
            image,
        )
        self.lease = lease  # of several engines, its place on the one it runs on
        self.step_index = 0
        self.step_metrics: list[dict[str, float] | None] = []
        self.step_info: list[dict[str, Any]] = []
        self.verifier_dirs_used = False  # /tests and /logs/verifier hold the last verifier's
        self.record: EpisodeRecord | None = None  # HARBOR_OPENENV_RECORD_DIR's trial, if on
        self.outcome: Outcome | None = None  # how the last evaluate ended the episode
        self.fork_point: ForkPoint | None = None  # what a branch started from (None: a task's)
        self.inherited: list[tuple[str, int]] | None = None  # a branch's parent's changes
        environments = GradingEnvironments(runtime, task, envs, image, self.on, sandbox.workdir)
        # each step's strategy; the pristine verifier's next environment, if a step grades in one
        self.gradings, self.spare = environments.gradings()
        runtime.backend.reach(
            image, self.on, wait=False
        )  # the tamper report's, probed once per image

    @classmethod
    def start(cls, runtime: Runtime, task: Task) -> Episode:
        """Start ``task``'s environment (from the warm pool when it can), run its healthcheck and
        prepare the first step; whatever fails ends the episode before it is returned."""
        envs = resolve_envs(task)

        def start(on: On) -> tuple[str, Sandbox]:
            image = runtime.backend.task_image(task, on)
            request = EnvRequest.of_task(task, image, envs.environment, on=on)
            return image, runtime.launch(request, pooled=True)

        lease, (image, sandbox) = runtime.backend.place(start)
        episode = cls(runtime, task, sandbox, envs, image, lease)
        try:
            episode._ready()
            episode._prepare_grading(episode.step_index)
        except BaseException:
            episode.end()
            raise
        return episode

    @classmethod
    def branch(
        cls, runtime: Runtime, point: ForkPoint, ident: str, ready: Future[Sandbox] | None
    ) -> Episode:
        """Start a branch of a fork: the fork's task at its step, in the container the fork
        started for ``ident`` (``ready``), or, where that start failed or none was made, in one
        of the committed image started now as a task's is (never from, nor refilling, the warm
        pool); the environment's healthcheck runs again (processes were not carried), the step's
        setup does not (its files were). ``point`` is released when the branch's container is
        gone; ``ident`` is given back if no container can start."""
        try:
            lease = runtime.backend.lease(point.engine)  # of several engines, the fork's
        except BaseException:
            runtime.forks.give_back(ident, point)
            if ready is not None:
                ready.add_done_callback(functools.partial(unused, runtime))
            raise
        sandbox = started(runtime, ready)
        task = point.task
        envs = resolve_envs(task)
        if sandbox is None:
            try:
                sandbox = branch_start(runtime, point)()
            except BaseException:
                if lease is not None:
                    lease.release()
                runtime.forks.give_back(ident, point)
                raise
        episode = cls(runtime, task, sandbox, envs, point.source_image, lease)
        episode.fork_point, episode.inherited = point, point.changes
        episode.step_index = point.step_index
        episode.step_metrics = list(point.step_metrics)
        episode.step_info = copy.deepcopy(point.step_info)
        try:
            episode._ready(prepare=False)
            episode._prepare_grading(episode.step_index)
        except BaseException:
            episode.end()
            raise
        return episode

    def fork(self, n: int) -> list[str]:
        """Commit this episode's filesystem (not its processes) for ``n`` branches, whose
        containers start in the background; their IDs. The episode goes on unchanged."""
        if self.task.compose_file is not None:
            raise ActionError(
                "fork: a compose task cannot be forked (its sidecars, the other services, would"
                " not be)"
            )
        runtime, sandbox = self.runtime, self.sandbox
        changes = self._changes(runtime.backend.reach(self.image, self.on))
        image = sandbox.commit({LABEL: "1", LABEL_OWNER: runtime.owner, LABEL_FORK: "1"})
        point = ForkPoint(
            image,
            self.task,
            self.image,
            self.step_index,
            list(self.step_metrics),
            copy.deepcopy(self.step_info),
            changes,
            self.lease.engine if self.lease is not None else None,
        )
        return runtime.forks.add(point, n, branch_start(runtime, point))

    def _ready(self, *, prepare: bool = True) -> None:
        config, sandbox = self.task.config, self.sandbox
        limit = disk_limit(config.environment, self.runtime.settings)
        if limit:
            self.runtime.disk.watch(sandbox, limit)
        where = f"{self.task.id}/task.toml: [environment.healthcheck]"
        if config.environment.healthcheck is not None:
            sandbox.healthcheck(config.environment.healthcheck, user=None, where=where)
        if config.steps and prepare:
            self.prepare_step()
        if config.steps or config.environment.healthcheck:
            # The baseline, once: what runs now is the environment's; nothing started later
            # (by the agent, or by a verifier running the agent's code) is ever added to it.
            sandbox.mark_baseline()

    # -- the current step ----------------------------------------------------------------------

    @property
    def step(self) -> StepConfig | None:
        steps = self.task.config.steps
        return steps[self.step_index] if steps else None

    @property
    def instruction(self) -> str:
        step = self.step
        return self.task.step_instruction(step) if step else self.task.instruction

    @property
    def agent_user(self) -> str | None:
        """Who the agent's actions run as (None: the container's own user)."""
        step = self.step
        user = step.agent.user if step is not None else None
        if user is None:
            user = self.task.config.agent.user
        return None if user is None else str(user)

    @property
    def agent_timeout(self) -> float | None:
        step = self.step
        if step is not None and step.agent.timeout_sec is not None:
            return step.agent.timeout_sec
        return self.task.config.agent.timeout_sec

    def step_fields(self) -> dict[str, Any]:
        """The current step's timeouts and, in a multi-step task, its name and place."""
        config, step = self.task.config, self.step
        fields: dict[str, Any] = {
            "agent_timeout_sec": self.agent_timeout,
            "verifier_timeout_sec": (step.verifier if step else config.verifier).timeout_sec,
        }
        if step is not None:
            fields["step"] = {
                "name": step.name,
                "index": self.step_index,
                "count": len(config.steps or []),
            }
        return fields

    def prepare_step(self) -> None:
        """After a step: stop what its verifier left running and clear its /tests and
        /logs/verifier. Then reset /logs/agent, upload ``steps/<name>/workdir/`` into the workdir,
        run its setup.sh and the step's healthcheck. Processes setup.sh starts after the first
        step are not the environment's: the step's evaluate stops them like the agent's."""
        sandbox, step = self.sandbox, self.step
        assert step is not None
        if self.step_index > 0 and self.verifier_dirs_used:
            sandbox.stop_processes(prepare=("", VERIFIER_DIR, TESTS_DIR, contract.PREPARE_STAGE))
        script = "rm -rf -- /logs/agent && mkdir -p /logs/agent && chmod 777 /logs/agent"
        cleared = sandbox.exec_root(script)
        if cleared.exit_code != 0:
            raise SandboxError(f"cannot clear the last step's outputs: {cleared.output.strip()}")
        self.verifier_dirs_used = False
        folder = self.task.step_workdir(step)
        if folder.is_dir():
            sandbox.put_dir(folder, sandbox.workdir, replace=False)
        if (folder / "setup.sh").is_file():
            run = sandbox.exec(
                f"bash {sandbox.workdir.rstrip('/')}/setup.sh",
                timeout_s=self.runtime.settings.solve_timeout_s,
                max_output=TAIL,
                user=self.agent_user,
            )
            if run.exit_code != 0:
                raise SandboxError(
                    f"{self.task.where(folder)}/setup.sh exited with code"
                    f" {run.exit_code}: {run.output.strip()[-2000:]}"
                )
        where = f"{self.task.id}/task.toml: [[steps]] {step.name} healthcheck"
        if step.healthcheck is not None:
            sandbox.healthcheck(step.healthcheck, user=self.agent_user, where=where)

    # -- grading -------------------------------------------------------------------------------

    def evaluate(self) -> HarborObservation:
        """Run the current step's verifier (in this sandbox, or a separate verifier in its own);
        then move on to the next step (done=False) or end with the episode's reward (done)."""
        task, step = self.task, self.step
        key = step.name if step else None
        settings = self.runtime.settings
        verifier = Verifier(
            task,
            step,
            self.envs.verifier.get(key, {}),
            settings.max_reward_bytes,
            settings.reward_key,
        )
        found: dict[str, Any] = {}  # the tamper report: the agent's changes, once it is stopped

        def report() -> None:
            found["tamper"] = self.tamper_report()

        grading = self.gradings[self.step_index]
        self.verifier_dirs_used |= isinstance(grading, Shared)
        verdict = grading.grade(verifier, self.sandbox, report)
        self._prepare_grading(self.step_index + 1)  # a later step's pristine environment
        info: dict[str, Any] = {
            "metrics": verdict.reward.metrics,
            "reward_details": verdict.reward.details,
            "verifier_timed_out": verdict.timed_out,
            "tamper": found.get("tamper"),
            "verifier_environment": grading.mode,
        }
        if self.sandbox.exceeded:  # the disk guard stopped the verifier: its files prove nothing
            exceeded = self.sandbox.exceeded
            return self._done(Outcome(None, exceeded, verdict.stdout, info, None, Failure.EPISODE))
        if step is None:
            outcome = Outcome(
                verdict.value, verdict.error, verdict.stdout, info, verdict.metrics, verdict.failure
            )
            return self._done(outcome)
        return self._finish_step(step, verdict, info)

    def _prepare_grading(self, index: int) -> None:
        """Start step ``index``'s pristine environment, if it grades in one (now, so that it is
        ready by its evaluate)."""
        if index < len(self.gradings):
            grading = self.gradings[index]
            if isinstance(grading, Pristine):
                grading.prepare()

    def _changes(self, reach: Reach = GUESSED) -> list[tuple[str, int]] | None:
        """What the agent's environment changed since its baseline (:func:`.tamper.changes`:
        the keeper's walk, the engine's list where it must), with a branch's parent's changes
        before the fork."""
        changes = tamper.changes(self.sandbox, reach)
        if changes is not None and self.inherited is not None:
            changes = merge_changes(self.inherited, changes)
        return changes

    def tamper_report(self) -> dict[str, Any] | None:
        """What the agent changed outside its workdir, by what the verifier of the task's image
        (with the step's ``[verifier].env``) can run or import (:mod:`.tamper`), counted in the
        metrics; None where the backend cannot tell."""
        key = self.step.name if self.step else None
        reach = self.runtime.backend.reach(self.image, self.on).with_env(
            {**self.envs.environment, **self.envs.verifier.get(key, {})}
        )
        try:
            changes = self._changes(reach)
        except SandboxError as exc:
            return {"error": str(exc)}
        if changes is None:
            return None
        report = tamper.classify(changes, self.sandbox.workdir, reach)
        report.count(self.runtime.metrics.tamper)
        return report.info()

    def _finish_step(
        self, step: StepConfig, verdict: Verdict, info: dict[str, Any]
    ) -> HarborObservation:
        """Record the step's result; advance (done=False, the next instruction) or end."""
        config = self.task.config
        if self.record is not None:
            self.record.verified(
                step.name,
                verdict.value,
                verdict.metrics or {},
                verdict.stdout,
                verdict.error,
                verdict.failure,
            )
        self.step_metrics.append(verdict.metrics)
        self.step_info.append(
            {"name": step.name, "reward": verdict.value, **info, "error": verdict.error}
        )
        stop = gate(step, verdict.metrics, verdict.error)
        # a step without a result stops the episode for its own reason; a min_reward stop is the
        # episode's
        stopped = (verdict.failure if verdict.metrics is None else None) or Failure.EPISODE
        if stop is None and self.step_index + 1 < len(config.steps or []):
            self.step_index += 1
            try:
                self.prepare_step()
            except SandboxError as exc:
                stop = str(exc)
            else:
                # The episode's reward arrives once, when it ends (by the task's strategy); the
                # step's own reward is in info["steps"], so a trainer never counts it twice.
                return self.observe(
                    "evaluate",
                    reward=None,
                    done=False,
                    error=verdict.error,
                    output=verdict.stdout,
                    instruction=self.instruction,
                    info={**info, **self.step_fields(), "steps": self.step_info},
                )
        strategy, key = config.multi_step_reward_strategy, self.runtime.settings.reward_key
        info = {**info, "steps": self.step_info}
        return self._done(
            steps_outcome(self.step_metrics, strategy, key, info, verdict.stdout, stop, stopped)
        )

    def _done(self, outcome: Outcome) -> HarborObservation:
        """The last evaluate's answer; :attr:`outcome` keeps how the episode ended."""
        self.outcome = outcome
        return self.observe(
            "evaluate",
            reward=outcome.reward,
            done=True,
            error=outcome.error,
            output=outcome.output,
            info=outcome.info,
        )

    def conclude(self, outcome: Outcome) -> None:
        """Record how the episode ended (its record, if on, is this episode's alone)."""
        if self.record is not None:
            self.record.verified(
                None,
                outcome.reward,
                outcome.metrics or {},
                outcome.output,
                outcome.error,
                outcome.failure,
            )

    # -- its engine ----------------------------------------------------------------------------

    @property
    def on(self) -> On:
        """Of several engines, the one this episode runs on (None: the server's one engine)."""
        return self.lease.engine if self.lease is not None else None

    def lost(self, *, check: bool = False) -> str | None:
        """Why this episode has ended with its engine, one of several, that went down (None: it
        has not); ``check``: ping the engine first."""
        return self.lease.lost(check=check) if self.lease is not None else None

    # -- answers and the end -------------------------------------------------------------------

    def observe(self, action_type: str, **fields: Any) -> HarborObservation:
        """An observation of this episode's task and workdir."""
        return HarborObservation(
            action_type=action_type,
            task_id=self.task.id,
            workdir=self.sandbox.workdir,
            **fields,
        )

    def end(self) -> None:
        """Stop watching the sandbox and remove it in the background; the warm pool counts the
        episode until it is gone."""
        if self.record is not None:
            self.record.finish()
        if self.spare is not None:
            self.spare.close()
        if self.lease is not None:
            self.lease.release()
        self.runtime.disk.forget(self.sandbox)
        ending, point = self.runtime.pool.ending(), self.fork_point
        if point is None:
            self.runtime.discard(self.sandbox, ending)
            return

        def then() -> None:  # a branch's container is gone: its fork's image may go too
            ending()
            self.runtime.forks.release(point)

        self.runtime.discard(self.sandbox, then)
