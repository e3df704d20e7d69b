"""The Docker engine client every part of the runtime uses, safe under many threads: the engine
Docker's own settings name (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``), on this
host's socket or remote by TCP with TLS or by SSH."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests
from docker.constants import MINIMUM_DOCKER_API_VERSION
from docker.transport.sshconn import SSHHTTPAdapter
from docker.transport.unixconn import UnixHTTPAdapter, UnixHTTPConnectionPool

_API_TIMEOUT_S = 300
# Docker's own settings that name an engine: one of several engines gets its own, never these.
DOCKER_VARIABLES = ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT")
_PING_TIMEOUT_S = 5


class _OnePoolAdapter(UnixHTTPAdapter):
    """docker-py keys its connection pools by request URL and closes the least recently used one
    past 25, also while another thread still uses it: under many sessions a request then fails
    inside urllib3 (``'NoneType' object has no attribute 'qsize'``, ``ClosedPoolError``). Every
    request goes to the same socket, so one pool serves them all and is never closed early."""

    def get_connection(
        self, url: str | bytes, proxies: Mapping[str, str] | None = None
    ) -> UnixHTTPConnectionPool:
        return super().get_connection(self.socket_path, proxies)


class _OneSSHPoolAdapter(SSHHTTPAdapter):
    """The same for an SSH engine: one pool of channels over the one SSH connection."""

    def get_connection(self, url: str | bytes, proxies: Mapping[str, str] | None = None) -> Any:
        return super().get_connection("ssh", proxies)


def connect(
    *,
    concurrency: int = 10,
    timeout_s: int = _API_TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
) -> docker.DockerClient:
    """A client for the engine ``DOCKER_HOST`` names (in ``environ``, default this process's
    environment), keeping up to ``concurrency`` idle connections (the most requests expected at
    once).

    ``ssh://`` goes through paramiko (``~/.ssh``'s config, keys and known_hosts; ``docker system
    dial-stdio`` on the far side); a TLS engine is verified against ``DOCKER_CERT_PATH``'s
    ``ca.pem`` alone. Raises docker's ``DockerException``.
    """
    client = docker.from_env(
        timeout=timeout_s,
        max_pool_size=concurrency,
        version=MINIMUM_DOCKER_API_VERSION,  # negotiated below, once requests are set up
        environment=environ,
    )
    api = client.api
    old = api.get_adapter(api.base_url)
    if isinstance(old, UnixHTTPAdapter):
        adapter = _OnePoolAdapter(
            f"http+unix://{old.socket_path}", timeout_s, max_pool_size=concurrency
        )
        api.mount("http+docker://", adapter)
        api._custom_adapter = adapter  # type: ignore[attr-defined]  # docker-py's fallback adapter
        old.close()
    elif isinstance(old, SSHHTTPAdapter):
        ssh = _OneSSHPoolAdapter(f"ssh://{old.ssh_host}", timeout_s, max_pool_size=concurrency)
        api.mount("http+docker://ssh", ssh)
        api._custom_adapter = ssh  # type: ignore[attr-defined]
        old.close()
    if api.base_url.startswith("https://"):
        # requests would take REQUESTS_CA_BUNDLE (or CURL_CA_BUNDLE) over the CA docker-py set
        # from DOCKER_CERT_PATH: a TLS engine is verified against its own CA only.
        api.trust_env = False
    try:
        api._version = api.version(api_version=False)["ApiVersion"]  # type: ignore[attr-defined]
    except (requests.RequestException, KeyError) as exc:
        raise docker.errors.DockerException(
            f"cannot reach {(environ or os.environ).get('DOCKER_HOST') or 'the default socket'}:"
            f" {exc}"
        ) from None
    client.ping()
    return client


def ping(client: docker.DockerClient, timeout_s: float = _PING_TIMEOUT_S) -> None:
    """Ask the engine's ``/_ping`` within ``timeout_s`` (not the client's long API timeout);
    raises requests' or docker's exception when it does not answer."""
    api: Any = client.api  # docker-py's request helpers, undeclared
    response = api._get(api._url("/_ping"), timeout=timeout_s)
    api._raise_for_status(response)


def use_tls_contents(ca: str, cert: str, key: str) -> Path:
    """Write a TLS engine's ``ca.pem``, ``cert.pem`` and ``key.pem`` given as contents (a host
    whose secrets are variables, not files) into a new private folder and point
    ``DOCKER_CERT_PATH`` and ``DOCKER_TLS_VERIFY`` of this process there, so docker-py and the
    compose CLI it runs both use them; the folder."""
    folder = Path(tempfile.mkdtemp(prefix="harbor-openenv-docker-tls-"))  # mode 0700
    for name, text in (("ca.pem", ca), ("cert.pem", cert), ("key.pem", key)):
        path = folder / name
        path.touch(mode=0o600)
        path.write_text(text.strip() + "\n", encoding="utf-8")
    os.environ["DOCKER_CERT_PATH"] = str(folder)
    os.environ["DOCKER_TLS_VERIFY"] = "1"
    return folder


def is_local(client: docker.DockerClient) -> bool:
    """Whether the engine is reached through a unix socket of this host."""
    return client.api.base_url.startswith("http+docker://localhost")
