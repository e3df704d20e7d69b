"""The harness cache's per-episode install cost (issue 35; goal <= 0.3 s): each cached harness's
build read from the helper's volume (put there once per server, mounted read-only), against the
same build uploaded into each container, in one run on one engine, from one filled cache
(``HARBOR_OPENENV_HARNESS_CACHE`` or ``--cache``).

Each repetition starts a fresh container of ``debian:bookworm-slim`` (network none) the way a
server does. Mounted, the install is what a rollout does before the harness starts: the probe
that picks the build and checks its libraries load (``CachedHarness.locate``), which runs in the
first command's shell, so an empty exec's time is taken off. Uploaded, it is the same build's tar
imported through the engine, then the same probe.

    .venv/bin/python bench/harness_install.py --cache ~/.cache/harbor-openenv/harnesses [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

import docker

from harbor_openenv.harness.base import Budget, HarnessRun, ModelEndpoint
from harbor_openenv.harness.cache import BUILDS, HarnessCache, host_platforms
from harbor_openenv.harness.cached import KINDS, PROBE, CachedHarness
from harbor_openenv.sandbox import remove_containers
from harbor_openenv.sandbox.spec import ContainerSpec
from harbor_openenv.sandbox.starter import DockerStarter

SPEC = ContainerSpec("debian:bookworm-slim", workdir="/work", network="none")
UPLOADED = "/opt/harbor-openenv-upload"  # where the upload puts the build
MODEL = ModelEndpoint("http://127.0.0.1:1/v1", "unused", "unused")


def empty_exec(sandbox) -> float:
    """An exec that does nothing: the probe's own exec costs a rollout nothing (it runs in the
    first command's shell), so it is taken off."""
    started = time.monotonic()
    sandbox.exec("true", timeout_s=60, max_output=1 << 10)
    return time.monotonic() - started


def probe(harness: CachedHarness, sandbox) -> float:
    """The mounted install: the probe's seconds (it finds the build and its libraries load)."""
    run = HarnessRun(sandbox, "", "root", "/work", MODEL, Budget(1, 60))
    started = time.monotonic()
    harness.locate(run)
    return max(time.monotonic() - started - empty_exec(sandbox), 0.0)


def upload(harness: CachedHarness, sandbox, archive: Path) -> float:
    """The uploaded install: the build's tar imported through the engine, then the same probe."""
    started = time.monotonic()
    with open(archive, "rb") as stream:
        sandbox.import_archive(UPLOADED, stream)
    found = sandbox.exec_root(PROBE, *harness.probe_args(f"{UPLOADED}/harnesses"))
    assert found.exit_code == 0, found.output
    return max(time.monotonic() - started - empty_exec(sandbox), 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cache", type=Path, default=os.environ.get("HARBOR_OPENENV_HARNESS_CACHE")
    )
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    assert args.cache, "give --cache (or set HARBOR_OPENENV_HARNESS_CACHE)"
    cache = HarnessCache(args.cache)
    names = [name for name in cache.harnesses() if name in KINDS]
    assert names, f"{args.cache} holds no harness build (harbor-openenv harnesses fill)"
    client = docker.from_env(timeout=600)
    machine = client.info()["Architecture"]
    glibc = host_platforms(machine)[0]
    owner = f"bench-harness-{uuid.uuid4().hex[:8]}"
    mounted = DockerStarter(lambda: client, owner=owner, extras=lambda m: [cache.volume_archive(m)])
    uploads = DockerStarter(lambda: client, owner=owner)
    rows: dict[str, dict[str, list[float]]] = {}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-harness-") as scratch:
        try:
            started = time.monotonic()
            mounted.helper_volume(SPEC.image)
            fill = time.monotonic() - started
            uploads.helper_volume(SPEC.image)
            for name in names:
                harness = CachedHarness(BUILDS[name], *KINDS[name])
                archive = Path(scratch) / f"{name}.tar"
                with tarfile.open(archive, "w") as tar:  # the build, and its node if any
                    for part in filter(None, [name, BUILDS[name].runtime]):
                        tar.add(args.cache / part / glibc, arcname=f"harnesses/{part}/{glibc}")
                sizes[name] = archive.stat().st_size
                rows[name] = {"upload": [], "volume": []}
                for _ in range(args.reps):
                    for kind, backend in (("upload", uploads), ("volume", mounted)):
                        sandbox = backend.start(SPEC, task_id="bench-harness")
                        try:
                            if kind == "volume":
                                rows[name][kind].append(probe(harness, sandbox))
                            else:
                                rows[name][kind].append(upload(harness, sandbox, archive))
                        finally:
                            sandbox.remove()
        finally:
            remove_containers(client, owner=owner)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.reps} reps; {SPEC.image}, {glibc}")
    print(f"helper volume with the harness cache, made once per server: {fill:.2f} s")
    for name, times in rows.items():
        up, vol = (statistics.median(times[kind]) for kind in ("upload", "volume"))
        print(
            f"{name} ({sizes[name] / 1e6:.0f} MB): per-episode install from the volume"
            f" {vol:.3f} s (goal <= 0.3 s), uploaded {up:.2f} s: {vol / up:.3f}x the upload"
        )


if __name__ == "__main__":
    main()
