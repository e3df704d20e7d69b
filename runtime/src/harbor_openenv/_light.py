"""OpenEnv 0.10's client side without openenv: the wire models' bases and a WebSocket client.

Why not OpenEnv's own ``EnvClient``: importing ``openenv.core.env_client`` runs
``openenv.core.__init__``, which imports OpenEnv's HTTP server (fastapi, uvicorn, starlette) and
its MCP layer (fastmcp, mcp); and ``pip install openenv`` pulls gradio, openai, huggingface_hub and
fastmcp with it (about 320 MB in a fresh venv). A trainer needs one WebSocket and pydantic.

So the ``client`` extra installs websockets only, and where openenv is not installed the runtime
(see ``_openenv``) takes these stand-ins: the same pydantic bases (fields and config as OpenEnv
0.10's ``Action``, ``Observation``, ``State``), OpenEnv's ``StepResult`` shape, and a client for
the protocol OpenEnv's ``EnvClient`` speaks on ``/ws``: one JSON frame per request,
``{"type": "reset"|"step"|"state"|"close", "data": ...}``, one frame back, ``{"type": "error",
"data": {"message", "code"}}`` on failure. Where openenv is installed, its classes are used and
nothing here is.

The client is synchronous; inside a running event loop each call returns an awaitable instead (run
on the client's own thread), which also resolves on attribute access, as OpenEnv's client does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import threading
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

_STRICT = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")
StateT = TypeVar("StateT")


class Action(BaseModel):
    model_config = _STRICT
    metadata: dict[str, Any] = Field(default_factory=dict)


class Observation(BaseModel):
    model_config = _STRICT
    done: bool = False
    reward: bool | int | float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class State(BaseModel):
    model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)
    episode_id: str | None = None
    step_count: int = Field(default=0, ge=0)


@dataclass
class StepResult(Generic[ObsT]):
    observation: ObsT
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None


def _ws_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(http):
            url = ws + url[len(http) :]
    if not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return url + "/ws"


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Pending:
    """A call made inside a running event loop: await it, or read an attribute to wait for it."""

    def __init__(self, future: Future[Any]) -> None:
        self._future = future

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self._future).__await__()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._future.result(), name)


class EnvClient(Generic[ActT, ObsT, StateT]):
    """One WebSocket session with an OpenEnv server; subclasses parse results and states."""

    def __init__(
        self,
        base_url: str | None = None,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 60.0,
        max_message_size_mb: float = 100.0,
        websocket_ping_interval_s: float | None = 20.0,
        websocket_ping_timeout_s: float | None = 20.0,
        headers: dict[str, str] | None = None,
        **unsupported: Any,
    ) -> None:
        if base_url is None or unsupported:
            raise TypeError(
                "the light client takes a base_url (and timeouts, headers) only; providers,"
                " from_docker_image and MCP mode are OpenEnv's:"
                " pip install 'harbor-openenv[server]'"
            )
        self.base_url = base_url.rstrip("/")
        self._ws_url = _ws_url(base_url)
        self._connect_timeout = connect_timeout_s
        self._message_timeout = message_timeout_s
        self._max_size = int(max_message_size_mb * 1024 * 1024)
        self._ping = (websocket_ping_interval_s, websocket_ping_timeout_s)
        self._headers = headers
        self._ws: Any = None
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    # -- what subclasses provide, as in OpenEnv -------------------------------------------------

    def _step_payload(self, action: ActT) -> dict[str, Any]:
        raise NotImplementedError

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ObsT]:
        raise NotImplementedError

    def _parse_state(self, payload: dict[str, Any]) -> StateT:
        raise NotImplementedError

    # -- the protocol ---------------------------------------------------------------------------

    def _connect(self) -> None:
        from websockets.sync.client import connect

        if self._ws is not None:
            return
        try:
            # Entered as a context manager (closed in _close): websockets 17 warns otherwise.
            self._ws = connect(
                self._ws_url,
                open_timeout=self._connect_timeout,
                max_size=self._max_size,
                ping_interval=self._ping[0],
                ping_timeout=self._ping[1],
                additional_headers=self._headers,
                **({"proxy": None} if _is_loopback(self._ws_url) else {}),
            ).__enter__()
        except Exception as exc:
            raise ConnectionError(f"Failed to connect to {self._ws_url}: {exc}") from exc

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        with self._lock:
            self._connect()
            ws = self._ws
            # A refused session sends its error frame, then closes: read it below.
            with contextlib.suppress(ConnectionClosed):
                ws.send(json.dumps(message))
            try:
                raw = ws.recv(timeout=self._message_timeout)
            except BaseException:
                # A late answer would pair with the next request: drop this socket instead.
                self._ws = None
                ws.close()
                raise
        response: dict[str, Any] = json.loads(raw)
        if response.get("type") == "error":
            error = response.get("data", {})
            raise RuntimeError(
                f"Server error: {error.get('message', 'Unknown error')}"
                f" (code: {error.get('code', 'UNKNOWN')})"
            )
        return response

    def _reset(self, **kwargs: Any) -> StepResult[ObsT]:
        response = self._request({"type": "reset", "data": kwargs})
        return self._parse_result(response.get("data", {}))

    def _step(self, action: ActT) -> StepResult[ObsT]:
        response = self._request({"type": "step", "data": self._step_payload(action)})
        return self._parse_result(response.get("data", {}))

    def _state(self) -> StateT:
        return self._parse_state(self._request({"type": "state"}).get("data", {}))

    def _close(self) -> None:
        with self._lock:
            ws, self._ws = self._ws, None
            if ws is not None:
                with contextlib.suppress(Exception):  # closing the socket ends it anyway
                    ws.send(json.dumps({"type": "close"}))
                ws.close()

    # -- sync, or awaitable inside a running loop -----------------------------------------------

    def _dispatch(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return call(*args, **kwargs)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="harbor-openenv-client")
        return _Pending(self._executor.submit(call, *args, **kwargs))

    def connect(self) -> Any:
        return self._dispatch(self._connected)

    def _connected(self) -> Any:
        self._connect()
        return self

    def reset(self, **kwargs: Any) -> Any:
        return self._dispatch(self._reset, **kwargs)

    def step(self, action: ActT, **kwargs: Any) -> Any:
        return self._dispatch(self._step, action)

    def state(self) -> Any:
        return self._dispatch(self._state)

    def close(self) -> Any:
        return self._dispatch(self._close)

    def sync(self) -> EnvClient[ActT, ObsT, StateT]:
        """This client (already synchronous): for code written against OpenEnv's ``.sync()``."""
        return self

    def __enter__(self) -> EnvClient[ActT, ObsT, StateT]:
        self._connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    async def __aenter__(self) -> EnvClient[ActT, ObsT, StateT]:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
