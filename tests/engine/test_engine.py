"""The engine client under many threads (a real engine)."""

from __future__ import annotations

import logging
import threading

import docker.errors

from harbor_openenv.sandbox import engine


def test_one_pool_serves_every_url_under_concurrent_requests(docker_client, caplog):
    """docker-py's own client, with its pools this small (``num_pools=2, max_pool_size=1``),
    fails here with urllib3's ``'NoneType' object has no attribute 'qsize'`` within a few
    hundred requests (the race a 32-session load test once met at docker-py's defaults)."""
    caplog.set_level(logging.ERROR, logger="urllib3")  # "pool is full" warnings are expected
    client = engine.connect(concurrency=1, timeout_s=60)
    errors: list[str] = []

    def work(thread: int) -> None:
        for i in range(150):
            try:
                client.api.inspect_container(f"harbor-openenv-absent-{thread % 4}-{i % 3}")
            except docker.errors.NotFound:
                pass
            except Exception as exc:
                errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    adapter = client.api.get_adapter(client.api.base_url)
    assert errors == []
    assert len(adapter.pools) == 1  # 12 URLs, one pool
    client.close()
