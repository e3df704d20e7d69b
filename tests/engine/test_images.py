"""Task images on the real engine: build failures and timeouts, identical environments built once,
local and registry images used without building, a dataset that differs from its manifest."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
from _server import FIXTURE_TASKS, Server

pytestmark = pytest.mark.docker


def test_build_failure_and_build_timeout_are_clear(tmp_path, docker_client):
    tasks = tmp_path / "tasks"
    for name, dockerfile, build_timeout in (
        ("fails", "FROM debian:bookworm-slim\nRUN echo about-to-fail && exit 3\n", 60),
        ("slow", "FROM debian:bookworm-slim\nRUN sleep 20\n", 2),
    ):
        task = tasks / name
        shutil.copytree(FIXTURE_TASKS / "edit-file", task)
        (task / "environment" / "Dockerfile").write_text(dockerfile + f"# {tmp_path}\n")
        toml = (
            (task / "task.toml")
            .read_text()
            .replace("build_timeout_sec = 120", f"build_timeout_sec = {build_timeout}")
        )
        (task / "task.toml").write_text(toml)
    srv = Server(tasks)
    try:
        with srv.client() as env:
            failed = env.reset(task_id="fails").observation.error
            assert "fails: building environment/Dockerfile failed" in failed
            assert "about-to-fail" in failed  # the build log's tail
            slow = env.reset(task_id="slow").observation.error
            assert "timed out after 2 s ([environment].build_timeout_sec)" in slow
    finally:
        srv.stop()


def test_identical_environments_build_once(tmp_path, docker_client):
    from harbor_openenv.images.resolver import ImageResolver
    from harbor_openenv.tasks.dataset import Dataset

    tasks = tmp_path / "tasks"
    for name in ("a", "b"):
        shutil.copytree(FIXTURE_TASKS / "edit-file", tasks / name)
        (tasks / name / "environment" / "Dockerfile").write_text(
            f"FROM debian:bookworm-slim\nRUN sleep 1\n# unique to this test run: {tmp_path}\n"
        )
    resolver = ImageResolver(docker_client)
    builds = []
    real = resolver._stream_build
    resolver._stream_build = lambda *args: builds.append(args) or real(*args)
    dataset = Dataset(tasks)
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            refs = list(pool.map(resolver.resolve, [dataset["a"], dataset["b"]] * 3))
        assert len(set(refs)) == 1 and len(builds) == 1
        assert ImageResolver(docker_client).resolve(dataset["a"]) == refs[0]  # survives restart
        assert len(builds) == 1
    finally:
        docker_client.images.remove(refs[0], force=True)


def test_local_only_image_is_never_pulled(tmp_path, docker_client):
    from harbor_openenv.images.resolver import ImageError, ImageResolver
    from harbor_openenv.tasks.dataset import Dataset

    task = tmp_path / "tasks" / "local"
    shutil.copytree(FIXTURE_TASKS / "edit-file", task)
    shutil.rmtree(task / "environment")
    ref = "harbor-openenv-test/generated-elsewhere:missing"
    (task / "task.toml").write_text(
        f'[environment]\ndocker_image = "{ref}"\n\n'
        f'[metadata.repo2env.reproducibility]\nmode = "local_only"\nimage_ref = "{ref}"\n'
    )
    resolver = ImageResolver(docker_client)
    resolver._pull = lambda *a: pytest.fail("a local_only image must never be pulled")
    with pytest.raises(ImageError, match="never pulled"):
        resolver.resolve(Dataset(tmp_path / "tasks")["local"])


def test_registry_and_docker_image_use_the_local_image_without_building(tmp_path, docker_client):
    from harbor_openenv.images.resolver import ImageResolver
    from harbor_openenv.tasks.dataset import Dataset

    root = tmp_path / "tasks"
    for name, toml in (
        ("prebuilt", '[environment]\ndocker_image = "debian:bookworm-slim"\n'),
        (
            "registry",
            '[metadata.repo2env.reproducibility]\nmode = "registry"\n'
            'image_ref = "debian:bookworm-slim"\n',
        ),
    ):
        shutil.copytree(FIXTURE_TASKS / "edit-file", root / name)
        (root / name / "task.toml").write_text(toml)
    resolver = ImageResolver(docker_client)
    resolver._stream_build = lambda *a: pytest.fail("nothing should be built")
    resolver._pull = lambda *a: pytest.fail("a present image is not pulled")
    dataset = Dataset(root)
    assert resolver.resolve(dataset["prebuilt"]) == "debian:bookworm-slim"
    assert resolver.resolve(dataset["registry"]) == "debian:bookworm-slim"


def test_tasks_that_differ_from_the_manifest_are_refused(tmp_path, docker_client):
    from harbor_openenv.datasets.manifest import MANIFEST_NAME, write_manifest

    tasks = tmp_path / "tasks"
    for name in ("edit-file", "no-reward"):
        shutil.copytree(FIXTURE_TASKS / name, tasks / name)
    write_manifest(tasks, tmp_path / MANIFEST_NAME)
    (tasks / "no-reward" / "tests" / "test.sh").write_text(
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
    )
    srv = Server(tasks)
    try:
        with srv.client() as env:
            error = env.reset(task_id="no-reward").observation.error
            assert "do not match tasks.sha256" in error
            assert "changed: tasks/no-reward/tests/test.sh" in error
            assert env.reset(task_id="edit-file").observation.error is None
    finally:
        srv.stop()
