"""The codex harness's per-episode install: uploaded into each container (the archive made and
sent through the engine) against read from the helper's volume (put there once per server,
mounted read-only), in one run on one engine, from one package (``HARBOR_OPENENV_CODEX_PACKAGE``
or ``--package``: a folder of scripts/fetch-codex, or an npm pack).

Each repetition starts a fresh container of ``debian:bookworm-slim`` (network none) the way a
server does and times, uploaded, ``Codex.install`` in it (from the volume a rollout does nothing
before codex starts: its launch line checks the binary is there), then ``codex --version`` under
that launch line from where it is; the volume's one-time fill is timed too. The upload's harness
is a new ``Codex`` per episode, as the server's registry makes one per rollout (so its archive is
made every time).

    .venv/bin/python bench/codex_install.py --package .cache/openai-codex-0.171.0-linux-x64.tgz
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from pathlib import Path

import docker

from harbor_openenv.harness.codex import LAUNCH, MOUNTED, Codex
from harbor_openenv.sandbox import remove_containers
from harbor_openenv.sandbox.spec import ContainerSpec
from harbor_openenv.sandbox.starter import DockerStarter

SPEC = ContainerSpec("debian:bookworm-slim", workdir="/work", network="none")


def one(backend: DockerStarter, package: Path, upload: bool) -> tuple[float, float]:
    """One episode: the install's seconds, and ``codex --version``'s (it ran from there)."""
    sandbox = backend.start(SPEC, task_id="bench-codex")
    try:
        started = time.monotonic()
        folder = Codex(package).install(sandbox) if upload else MOUNTED
        installed = time.monotonic() - started
        argv = (f"{folder}/bin/codex", "--version")
        ran = sandbox.exec(LAUNCH, args=argv, timeout_s=60, max_output=1 << 16)
        assert ran.exit_code == 0 and "codex" in ran.output, ran.output
        return installed, time.monotonic() - started - installed
    finally:
        sandbox.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--package", type=Path, default=os.environ.get("HARBOR_OPENENV_CODEX_PACKAGE")
    )
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    assert args.package, "give --package (or set HARBOR_OPENENV_CODEX_PACKAGE)"
    client = docker.from_env(timeout=600)
    owner = f"bench-codex-{uuid.uuid4().hex[:8]}"
    uploads = DockerStarter(lambda: client, owner=owner)
    codex = Codex(args.package)
    mounted = DockerStarter(lambda: client, owner=owner, extras=lambda m: [codex.volume_archive(m)])
    try:
        started = time.monotonic()
        mounted.helper_volume(SPEC.image)
        fill = time.monotonic() - started
        uploads.helper_volume(SPEC.image)
        times: dict[str, list[float]] = {"upload": [], "volume": []}
        runs: dict[str, list[float]] = {"upload": [], "volume": []}
        for _ in range(args.reps):
            for name, backend in (("upload", uploads), ("volume", mounted)):
                installed, ran = one(backend, args.package, upload=name == "upload")
                times[name].append(installed)
                runs[name].append(ran)
    finally:
        remove_containers(client, owner=owner)
    med = {name: statistics.median(values) for name, values in times.items()}
    size = sum(p.stat().st_size for p in [codex.volume_archive(client.info()["Architecture"])])
    print(f"codex package {args.package} ({size / 1e6:.0f} MB for this architecture)")
    print(f"helper volume with codex, made once per server: {fill:.2f} s")
    print(f"per-episode install, uploaded   {med['upload']:.2f} s (median of {args.reps})")
    print("per-episode install, from volume: none (the launch line finds codex there)")
    print(
        "codex --version after it:"
        f" {statistics.median(runs['upload']):.2f} s uploaded,"
        f" {statistics.median(runs['volume']):.2f} s from the volume"
    )


if __name__ == "__main__":
    main()
