"""The capture proxy a rollout's model calls go through: OpenEnv's (``create_app``,
``SessionRegistry``, ``export_session``), served by this module on 127.0.0.1 only.

One proxy per server process, started on the first rollout: OpenEnv's registry multiplexes
rollouts by API key (each rollout's key is its session id, unguessable, minted here), and each
session carries its own upstream (the trainer's endpoint named in the rollout action), so one port
and one thread serve every concurrent rollout. The session routes (mint, list, export, delete) need
an admin key that never leaves this process: a harness holding its session key can only make model
calls, which reach only that session's upstream.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.harness.base import ModelEndpoint

START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TrainerEndpoint:
    """The trainer's OpenAI-compatible model: where a rollout's captured calls are forwarded."""

    base_url: str
    model: str
    api_key: str | None = None


class CaptureError(HarborOpenEnvError):
    """A capture session cannot be opened (the trainer's endpoint cannot be used)."""


class CaptureSession:
    """One rollout's capture: its key (the harness's API key) and the proxy's record of it."""

    def __init__(self, proxy: CaptureProxy, session: Any, capture_level: str) -> None:
        self._proxy, self._session = proxy, session
        self.capture_level = capture_level

    @property
    def key(self) -> str:
        return str(self._session.session_id)

    @property
    def model_calls(self) -> int:
        """Model calls forwarded so far (the proxy's count, not the harness's)."""
        return int(self._session.model_calls)

    def endpoint(self, model: str) -> ModelEndpoint:
        """What the harness is given: the proxy's URL and this session's key, nothing else."""
        return ModelEndpoint(base_url=self._proxy.base_url, api_key=self.key, model=model)

    def export(self) -> dict[str, Any]:
        """The rollout as OpenEnv exports it (sequences with loss masks, validation), each turn
        with its parent (the turn whose prompt + completion prefixes its prompt) and token data."""
        from openenv.core.harness.capture.export import export_session

        document: dict[str, Any] = export_session(self._session, capture_level=self.capture_level)
        nodes = {node.node_id: node for node in self._session.graph.nodes()}
        for turn in document["turns"]:
            node = nodes[turn["node_id"]]
            turn.update(
                parent_id=node.parent_id,
                prompt_token_ids=list(node.prompt_ids),
                completion_token_ids=list(node.sampled_ids),
                logprobs=list(node.sampled_logprobs or []),
                message=node.response_message,
            )
        return document

    def close(self) -> None:
        """Forget the session: its key is refused from now on."""
        self._proxy.registry.delete(self.key)


class CaptureProxy:
    """OpenEnv's capture app, served by uvicorn in a daemon thread on 127.0.0.1 at a free port."""

    def __init__(self) -> None:
        from openenv.core.harness.capture.server import create_app

        # No default upstream: each session names the trainer's endpoint. The admin key guards
        # the session routes; no one outside this object ever holds it.
        self.app = create_app(require_registered=True, admin_key=secrets.token_urlsafe(32))
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.port = 0

    @property
    def registry(self) -> Any:
        return self.app.state.registry

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        """Serve the app (once; later calls return at once)."""
        import uvicorn

        with self._lock:
            if self._thread is not None:
                return
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
            config = uvicorn.Config(self.app, log_level="warning", lifespan="off")
            self._server = uvicorn.Server(config)
            self._thread = threading.Thread(
                target=self._server.run,
                kwargs={"sockets": [sock]},
                name="harbor-openenv-capture",
                daemon=True,
            )
            self._thread.start()
            deadline = time.monotonic() + START_TIMEOUT_S
            while not self._server.started:
                if not self._thread.is_alive() or time.monotonic() > deadline:
                    raise CaptureError("the capture proxy did not start")
                time.sleep(0.02)

    def open(
        self,
        trainer: TrainerEndpoint,
        *,
        max_model_calls: int,
        sampling: dict[str, Any] | None = None,
        **metadata: Any,
    ) -> CaptureSession:
        """A new session forwarding to ``trainer``, probed once per endpoint by OpenEnv (its
        capture level: ``tokens`` when it returns token ids and logprobs)."""
        from openenv.core.harness.capture.sessions import Upstream

        self.start()
        upstream = Upstream(llm_url=trainer.base_url, model=trainer.model, api_key=trainer.api_key)
        client, level = asyncio.run(self.app.state.upstreams.resolve(upstream))
        upstream = replace(upstream, model=client.served_model or upstream.model)
        try:
            session = self.registry.create(
                upstream=upstream,
                capture_level=level,
                max_model_calls=max_model_calls,
                sampling=sampling or None,
                **metadata,
            )
        except ValueError as exc:
            raise CaptureError(str(exc)) from None
        return CaptureSession(self, session, level)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
