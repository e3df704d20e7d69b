"""The trainer's side: the client (``HarborEnvClient``, ``agent_tools``), the episode driver, a
local server. Needs the ``client`` extra (websockets) only."""

from __future__ import annotations

from harbor_openenv.client.env_client import HarborEnvClient, agent_tools

__all__ = ["HarborEnvClient", "agent_tools"]
