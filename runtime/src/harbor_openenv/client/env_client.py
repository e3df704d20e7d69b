"""The trainer's side: a WebSocket client with one helper per action, and the agent tool schema."""

from __future__ import annotations

import builtins
import inspect
from typing import Any

from harbor_openenv._openenv import EnvClient, StepResult
from harbor_openenv.models import HarborAction, HarborObservation, HarborState

# evaluate waits for the task's verifier: up to [verifier].timeout_sec (Harbor's default 600 s).
DEFAULT_MESSAGE_TIMEOUT_S = 1800.0


class HarborEnvClient(EnvClient[HarborAction, HarborObservation, HarborState]):
    """Connects to a harbor-openenv server over ``/ws``; one client is one session.

    Every method returns a ``StepResult`` when called synchronously and an awaitable inside a
    running event loop, as OpenEnv's ``EnvClient`` does.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        orchestration_token: str | None = None,
        message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(base_url, message_timeout_s=message_timeout_s, **kwargs)
        self._token = orchestration_token
        self._options: dict[str, Any] = {
            "base_url": base_url,
            "orchestration_token": orchestration_token,
            "message_timeout_s": message_timeout_s,
            **kwargs,
        }

    def exec(self, command: str, timeout_s: float | None = None) -> Any:
        return self.step(HarborAction(action_type="exec", command=command, timeout_s=timeout_s))

    def read(self, path: str) -> Any:
        return self.step(HarborAction(action_type="read", path=path))

    def write(self, path: str, content: str) -> Any:
        return self.step(HarborAction(action_type="write", path=path, content=content))

    def list(self, path: str = ".") -> Any:
        return self.step(HarborAction(action_type="list", path=path))

    def evaluate(self) -> Any:
        """Run the task's verifier; the episode ends and the reward arrives (None if missing)."""
        return self.step(HarborAction(action_type="evaluate", token=self._token))

    def solve(self) -> Any:
        """Run the task's oracle (solution/solve.sh)."""
        return self.step(HarborAction(action_type="solve", token=self._token))

    def rollout(
        self,
        harness: str,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        sampling: dict[str, float | int] | None = None,
        max_turns: int | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Let ``harness`` act on the episode with the trainer's model (``base_url``: its
        OpenAI-compatible endpoint, which must return token ids and logprobs, as vLLM does), then
        grade it as evaluate does; the episode ends. The answer's ``info["rollout"]`` is the
        capture proxy's record: each turn's token ids, logprobs and parent, the sequences with
        their loss masks. Reward None (and an error) when the harness failed or never called the
        model; ``timeout_s`` must fit in this client's ``message_timeout_s``."""
        return self.step(
            HarborAction(
                action_type="rollout",
                token=self._token,
                harness=harness,
                base_url=base_url,
                model=model,
                api_key=api_key,
                sampling=sampling,
                max_turns=max_turns,
                timeout_s=timeout_s,
            )
        )

    def fork(self, n: int = 1) -> Any:
        """Fork the running episode into ``n`` branches: the fork action (with this client's
        token), then one new client per branch, connected to the same server and reset with
        ``fork=ID``; returns them (an awaitable of them inside a running event loop). Each branch
        is a session of its own: close it when done. Raises RuntimeError if the fork is refused;
        a branch whose reset failed is closed and the others too, then RuntimeError."""
        result = self.step(HarborAction(action_type="fork", n=n, token=self._token))
        if inspect.isawaitable(result):
            return self._fork_async(result)
        branches = [type(self)(**self._options) for _ in _fork_ids(result)]
        try:
            for branch, ident in zip(branches, _fork_ids(result), strict=True):
                _check_branch(ident, branch.reset(fork=ident))
        except BaseException:
            for branch in branches:
                branch.close()
            raise
        return branches

    async def _fork_async(self, pending: Any) -> builtins.list[HarborEnvClient]:
        ids = _fork_ids(await pending)
        branches = [type(self)(**self._options) for _ in ids]
        try:
            for branch, ident in zip(branches, ids, strict=True):
                _check_branch(ident, await branch.reset(fork=ident))
        except BaseException:
            for branch in branches:
                closed = branch.close()
                if inspect.isawaitable(closed):
                    await closed
            raise
        return branches

    def _step_payload(self, action: HarborAction) -> dict[str, Any]:
        payload: dict[str, Any] = action.model_dump(exclude_none=True, exclude={"metadata"})
        return payload

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[HarborObservation]:
        fields = dict(payload.get("observation", {}))
        fields.update(reward=payload.get("reward"), done=payload.get("done", False))
        observation = HarborObservation.model_validate(fields)
        return StepResult(
            observation=observation,
            reward=observation.reward,
            done=observation.done,
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: dict[str, Any]) -> HarborState:
        state: HarborState = HarborState.model_validate(payload)
        return state


def _fork_ids(result: StepResult[HarborObservation]) -> list[str]:
    """The branch IDs a fork action answered, or RuntimeError with its error."""
    observation = result.observation
    ids = observation.info.get("forks")
    if observation.error or not isinstance(ids, list):
        raise RuntimeError(f"fork refused: {observation.error or 'no fork IDs in the answer'}")
    return [str(ident) for ident in ids]


def _check_branch(ident: str, result: StepResult[HarborObservation]) -> None:
    if result.observation.error:
        raise RuntimeError(f"the branch {ident} did not start: {result.observation.error}")


def agent_tools() -> list[dict[str, Any]]:
    """The agent's tools (exec, read, write) in the JSON-schema form LLM tool calling uses.

    evaluate, solve, fork and rollout are deliberately absent: grading, solving, forking and
    running a harness are the trainer's business.
    """

    def tool(
        name: str, description: str, properties: dict[str, Any], required: list[str]
    ) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": required,
                    "additionalProperties": False,
                },
            },
        }

    path = {"type": "string", "description": "Path relative to the working directory."}
    return [
        tool(
            "exec",
            "Run a bash command in the task's working directory; returns its output and exit code.",
            {
                "command": {"type": "string", "description": "The bash command to run."},
                "timeout_s": {
                    "type": "number",
                    "description": "Seconds before the command is killed (the server caps it).",
                },
            },
            ["command"],
        ),
        tool("read", "Read a text file inside the working directory.", {"path": path}, ["path"]),
        tool(
            "write",
            "Create or overwrite a file inside the working directory.",
            {"path": path, "content": {"type": "string", "description": "The new content."}},
            ["path", "content"],
        ),
    ]
