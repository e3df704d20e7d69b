"""Task images in a registry: ``harbor-openenv images push`` and a server serving ``images.lock``.

A real registry (tests/support/_registry.py: Debian's ``docker-registry``) runs on 127.0.0.1 for the
module, with its own config, no auth and a temporary storage folder; the Docker engine pushes to
and pulls from it (loopback registries need no TLS). The images these tests build carry a nonce
label and are removed after.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterator

import docker.errors
import pytest
from _registry import NONCE, RegistryError, env_repo, remove_ours, serve_registry
from _serve import run_cli
from _server import ROOT, Server, runtime_containers, wait_until

from harbor_openenv.client.launch import free_port
from harbor_openenv.images.lock import (
    LOCK_NAME,
    LockedImage,
    lock_source,
    read_lock,
    write_lock,
)
from harbor_openenv.images.resolver import verifier_source
from harbor_openenv.tasks.dataset import Dataset

DIGEST_REF = r"task@sha256:[0-9a-f]{64}"
FORMAT_TASKS = ROOT / "tests" / "fixtures" / "format"


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> Iterator[str]:
    """``HOST:PORT`` of a registry served for this module, stopped after."""
    try:
        with serve_registry(tmp_path_factory.mktemp("registry")) as address:
            yield address
    except RegistryError as exc:
        pytest.fail(str(exc))


@pytest.mark.docker
def test_push_locks_digests_and_a_server_pulls_them_instead_of_building(
    docker_client, registry, tmp_path
):
    repo = env_repo(tmp_path, "edit-file", "same-image")  # one image, two tasks
    prefix = f"{registry}/test/env-{uuid.uuid4().hex[:8]}"
    lock = repo / LOCK_NAME
    try:
        result = run_cli("images", "push", repo, "--registry", prefix + "/", "-j", "2")
        assert result.returncode == 0, result
        assert "1 image(s) for 2 task(s)" in result.stderr
        assert re.search(
            rf"\[push 1/1\] harbor-openenv/task:\w+: pushed {prefix}/{DIGEST_REF}", result.stderr
        )
        assert result.stdout.splitlines()[0].split() == [
            "IMAGE",
            "TASKS",
            "STATUS",
            "SECONDS",
            "PUSHED",
        ]
        assert f"wrote {lock}: 2 task(s) pinned to {prefix}" in result.stdout
        assert not (repo / "tasks" / LOCK_NAME).exists()  # beside tasks/, never inside

        text = lock.read_text()
        document = json.loads(text)
        assert text == json.dumps(document, indent=2, sort_keys=True) + "\n"
        assert document["version"] == 1 and document["registry"] == prefix
        assert sorted(document["tasks"]) == ["edit-file", "same-image"]
        entry = document["tasks"]["edit-file"]
        assert document["tasks"]["same-image"] == entry  # built and pushed once
        assert re.fullmatch(rf"{re.escape(prefix)}/{DIGEST_REF}", entry["image"])
        task = Dataset(repo / "tasks")["edit-file"]
        assert entry["source"] == lock_source(task)
        assert entry["source"].startswith("harbor-openenv/task:")
        # The digest is the registry's own for what was pushed.
        built = docker_client.images.get(entry["source"])
        pushed_tag = next(tag for tag in built.tags if tag.startswith(prefix))
        digest = entry["image"].split("@", 1)[1]
        assert docker_client.images.get_registry_data(pushed_tag).id == digest

        again = run_cli("images", "push", repo, "--registry", prefix)
        assert again.returncode == 0, again
        assert lock.read_text() == text  # the same images: the same bytes

        # Gone from the engine: the tags these tests built, so reset must pull by digest.
        docker_client.images.remove(built.id, force=True, noprune=True)
        for ref in (entry["source"], entry["image"]):
            with pytest.raises(docker.errors.ImageNotFound):
                docker_client.images.get(ref)

        with Server(repo / "tasks") as server:
            with server.client() as env:
                reset = env.reset(task_id="edit-file")
                assert reset.observation.error is None, reset.observation.error
                (container,) = runtime_containers(docker_client, server.owner_prefix)
                assert container["Image"] == entry["image"]  # started from the digest reference
                assert env.solve().observation.exit_code == 0
                assert env.evaluate().reward == 1.0
            assert f"image pull task=edit-file image={entry['image']}" in server.output
            assert "image build" not in server.output
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.images.get(entry["source"])  # pulled, never built
        assert docker_client.images.get(entry["image"]).id == built.id

        # `images` ahead of serving makes what the server starts: the pinned image, pulled.
        docker_client.images.remove(built.id, force=True, noprune=True)
        ahead = run_cli("images", repo)
        assert ahead.returncode == 0, ahead
        assert "1 image(s) for 2 task(s)" in ahead.stderr
        assert f"image pull task=edit-file image={entry['image']}" in ahead.stderr
        assert "image build" not in ahead.stderr
        assert ahead.stdout.splitlines()[1].split()[:3] == [entry["image"], "2", "pulled"]
        assert docker_client.images.get(entry["image"]).id == built.id
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.images.get(entry["source"])
    finally:
        remove_ours(docker_client)


@pytest.mark.docker
def test_a_separate_verifiers_image_is_pushed_locked_and_pulled_too(
    docker_client, registry, tmp_path
):
    """A task whose verifier builds its own image (tests/Dockerfile): both images are pushed and
    pinned, and a server with neither image on its engine pulls both by digest, builds nothing,
    and the verifier still runs in its own image (metric own_image) on the agent's artifacts."""
    repo = tmp_path / "env"
    shutil.copytree(FORMAT_TASKS / "separate-verifier", repo / "tasks" / "separate-verifier")
    task_dir = repo / "tasks" / "separate-verifier"
    for dockerfile in (task_dir / "environment" / "Dockerfile", task_dir / "tests" / "Dockerfile"):
        with dockerfile.open("a") as handle:
            handle.write(f"LABEL {NONCE}\n")
    prefix = f"{registry}/test/sep-{uuid.uuid4().hex[:8]}"
    try:
        result = run_cli("images", "push", repo, "--registry", prefix)
        assert result.returncode == 0, result
        assert "2 image(s) for 1 task(s)" in result.stderr
        (entry,) = read_lock(repo / LOCK_NAME).values()
        task = Dataset(repo / "tasks")["separate-verifier"]
        verifier = verifier_source(task, None)
        assert verifier is not None and list(entry.verifiers) == [verifier]
        pinned = entry.verifiers[verifier]
        assert re.fullmatch(rf"{re.escape(prefix)}/{DIGEST_REF}", pinned) and pinned != entry.image

        remove_ours(docker_client)  # both built images, every tag: reset must pull
        for ref in (entry.source, verifier, entry.image, pinned):
            with pytest.raises(docker.errors.ImageNotFound):
                docker_client.images.get(ref)
        with Server(repo / "tasks") as server:
            with server.client() as env:
                assert env.reset(task_id="separate-verifier").observation.error is None
                assert env.solve().observation.exit_code == 0
                graded = env.evaluate()
                assert graded.reward == 1.0, graded
                assert graded.observation.info["metrics"]["own_image"] == 1.0
            for ref in (entry.image, pinned):
                assert f"image pull task=separate-verifier image={ref}" in server.output
            assert "image build" not in server.output, server.output

        # `images` ahead of serving follows the lock for the verifier's image too.
        for ref in (entry.image, pinned):
            docker_client.images.remove(ref, force=True, noprune=True)
        ahead = run_cli("images", repo)
        assert ahead.returncode == 0, ahead
        for ref in (entry.image, pinned):
            assert f"image pull task=separate-verifier image={ref}" in ahead.stderr
        assert "image build" not in ahead.stderr, ahead.stderr
    finally:
        remove_ours(docker_client)


@pytest.mark.docker
def test_a_failed_push_fails_the_command_and_writes_no_lock(docker_client, tmp_path):
    repo = env_repo(tmp_path, "edit-file")
    nowhere = f"127.0.0.1:{free_port()}/test"  # nothing listens there
    try:
        result = run_cli("images", "push", repo, "--registry", nowhere)
        assert result.returncode == 1, result
        failed = next(line for line in result.stderr.splitlines() if line.startswith("[push 1/1] "))
        assert "FAILED: pushing harbor-openenv/task:" in failed
        assert f"to {nowhere}/task:" in failed and "connection refused" in failed, failed
        assert f"{repo / LOCK_NAME} not written: every image must push first" in result.stdout
        assert not (repo / LOCK_NAME).exists()
    finally:
        remove_ours(docker_client)


@pytest.mark.docker
def test_a_lock_naming_an_unpullable_or_stale_image_is_a_reset_error(
    docker_client, registry, tmp_path
):
    repo = env_repo(tmp_path, "edit-file", "stale", nonce=False)
    dataset = Dataset(repo / "tasks")
    missing = f"{registry}/test/missing-{uuid.uuid4().hex[:8]}/task@sha256:{'0' * 64}"
    elsewhere = f"{registry}/test/other/task@sha256:{'1' * 64}"
    write_lock(
        repo / LOCK_NAME,
        f"{registry}/test",
        {
            "edit-file": LockedImage(missing, str(lock_source(dataset["edit-file"]))),
            "stale": LockedImage(elsewhere, "harbor-openenv/task:" + "0" * 32),
        },
    )
    with Server(repo / "tasks") as server:
        with server.client() as env:
            reset = env.reset(task_id="edit-file")
            error = reset.observation.error or ""
            assert reset.done and "edit-file" in error and missing in error, error
            assert "pulling" in error and LOCK_NAME in error
            assert wait_until(lambda: not runtime_containers(docker_client, server.owner_prefix))

            stale = env.reset(task_id="stale")
            error = stale.observation.error or ""
            assert stale.done and error.startswith("stale: "), error
            assert elsewhere in error and "images push" in error
        assert "image build" not in server.output

    images = run_cli("images", "build", repo)  # ahead of serving: the stale pin is a problem
    assert images.returncode == 1, images
    assert "1 image(s) for 2 task(s)" in images.stderr  # only edit-file's pin: nothing built
    assert f"[1/1] {missing} (edit-file): FAILED: edit-file: pulling" in images.stderr
    problems = images.stdout.splitlines()
    assert any(line.startswith("stale: ") and elsewhere in line for line in problems)
    assert "image build" not in images.stderr
