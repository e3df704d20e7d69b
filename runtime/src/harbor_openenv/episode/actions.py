"""The agent's actions: exec, read, write and list, inside the task's working directory, as the
agent's user. Each takes the episode and the action and answers with an observation. They (and a
rollout's harness, the agent too) are the only callers that let the sandbox use its exec channel
(``HARBOR_OPENENV_EXEC_CHANNEL``)."""

from __future__ import annotations

import base64
import binascii

from harbor_openenv.episode.episode import ActionError, Episode
from harbor_openenv.models import HarborAction, HarborObservation
from harbor_openenv.sandbox import SandboxError


def exec_command(episode: Episode, action: HarborAction) -> HarborObservation:
    """Run a bash command, within the server's timeout and output limit."""
    if not action.command:
        raise ActionError("exec needs a command")
    settings, sandbox = episode.runtime.settings, episode.sandbox
    timeout = min(action.timeout_s or settings.exec_timeout_s, settings.exec_timeout_s)
    result = sandbox.exec(
        action.command,
        timeout_s=timeout,
        max_output=settings.max_output_bytes,
        user=episode.agent_user,
        channel=settings.exec_channel,
    )
    episode.runtime.disk.nudge(sandbox)
    return episode.observe(
        "exec",
        output=result.output,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        truncated=result.truncated,
        error=f"timed out after {timeout:g} s; its processes were killed"
        if result.timed_out
        else None,
    )


def read_file(episode: Episode, action: HarborAction) -> HarborObservation:
    """A file's content: UTF-8 text, else base64."""
    sandbox, user, channel = episode.sandbox, episode.agent_user, _channel(episode)
    data, cut = sandbox.read_file(
        _need(action.path, "read"),
        max_bytes=episode.runtime.settings.max_read_bytes,
        user=user,
        channel=channel,
    )
    try:
        text, encoding = data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(data).decode(), "base64"
    return episode.observe("read", output=text, encoding=encoding, truncated=cut)


def write_file(episode: Episode, action: HarborAction) -> HarborObservation:
    """Write a file (UTF-8 or base64 content), within the server's size limit."""
    content = action.content or ""
    if action.encoding == "base64":
        try:
            data = base64.b64decode(content, validate=True)
        except binascii.Error:
            raise ActionError("content is not valid base64") from None
    else:
        data = content.encode()
    limit = episode.runtime.settings.max_write_bytes
    if len(data) > limit:
        raise ActionError(
            f"content is {len(data)} bytes, over this server's limit of {limit}"
            " (HARBOR_OPENENV_MAX_WRITE_BYTES); write large files with exec"
        )
    sandbox, user, channel = episode.sandbox, episode.agent_user, _channel(episode)
    path = sandbox.write_file(_need(action.path, "write"), data, user=user, channel=channel)
    return episode.observe("write", output=f"wrote {len(data)} bytes to {path}")


def list_dir(episode: Episode, action: HarborAction) -> HarborObservation:
    """A folder's entries."""
    sandbox, user, channel = episode.sandbox, episode.agent_user, _channel(episode)
    listing = sandbox.list_dir(action.path or ".", user=user, channel=channel)
    return episode.observe("list", output=listing)


def _channel(episode: Episode) -> bool:
    """Whether the agent's actions may use the sandbox's exec channel (the server's setting)."""
    return episode.runtime.settings.exec_channel


def _need(value: str | None, action: str) -> str:
    if not value:
        raise SandboxError(f"{action} needs a path")
    return value
