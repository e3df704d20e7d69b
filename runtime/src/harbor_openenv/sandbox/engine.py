"""The Docker engine client every part of the runtime uses, safe under many threads."""

from __future__ import annotations

from collections.abc import Mapping

import docker
from docker.transport.unixconn import UnixHTTPAdapter, UnixHTTPConnectionPool

_API_TIMEOUT_S = 300


class _OnePoolAdapter(UnixHTTPAdapter):
    """docker-py keys its connection pools by request URL and closes the least recently used one
    past 25, also while another thread still uses it: under many sessions a request then fails
    inside urllib3 (``'NoneType' object has no attribute 'qsize'``, ``ClosedPoolError``). Every
    request goes to the same socket, so one pool serves them all and is never closed early."""

    def get_connection(
        self, url: str | bytes, proxies: Mapping[str, str] | None = None
    ) -> UnixHTTPConnectionPool:
        return super().get_connection(self.socket_path, proxies)


def connect(*, concurrency: int = 10, timeout_s: int = _API_TIMEOUT_S) -> docker.DockerClient:
    """A client for the engine ``DOCKER_HOST`` names, keeping up to ``concurrency`` idle
    connections (the most requests expected at once). Raises docker's ``DockerException``."""
    client = docker.from_env(timeout=timeout_s, max_pool_size=concurrency)
    api = client.api
    old = api.get_adapter(api.base_url)
    if isinstance(old, UnixHTTPAdapter):
        adapter = _OnePoolAdapter(
            f"http+unix://{old.socket_path}", timeout_s, max_pool_size=concurrency
        )
        api.mount("http+docker://", adapter)
        api._custom_adapter = adapter  # type: ignore[attr-defined]  # docker-py's fallback adapter
        old.close()
    client.ping()
    return client
