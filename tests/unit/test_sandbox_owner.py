"""Owner identities (no engine needed): which container, if any, a server runs in; how a
container is removed when the engine answers a racing removal."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from harbor_openenv.sandbox.owner import own_container, remove_container

ID = "0e07840db6559c2b123a5c54786d6a91af8b34131dc4a97beb0bda86dfc49fe3"
OTHER = "e82573ff4c70b1b0c485c34116a972a0280fa9ac0ff5abc5b9459835dcb8573f"


def mount(root: str, point: str) -> str:
    return f"563 537 254:0 {root} {point} rw,relatime - ext4 /dev/vda rw"


def test_a_container_is_named_by_its_own_hostname_mount():
    info = "\n".join(
        [
            mount("/", "/"),
            mount(f"/var/lib/docker/containers/{ID}/resolv.conf", "/etc/resolv.conf"),
            mount(f"/var/lib/docker/containers/{ID}/hostname", "/etc/hostname"),
        ]
    )
    assert own_container(info) == ID


def test_a_host_listing_other_containers_mounts_is_no_container():
    """On a host whose mount table lists running containers' mounts (seen on CI machines), the
    server once took the first one's id as its own scope: when that container went away, every
    other server's sweep judged it dead and removed its containers mid-episode."""
    merged = f"/var/lib/docker/overlay2/{'a' * 64}/merged"
    info = "\n".join(
        [
            mount("/", "/"),
            mount(f"/var/lib/docker/containers/{OTHER}/hostname", f"{merged}/etc/hostname"),
            mount(f"/var/lib/docker/containers/{OTHER}/hosts", f"{merged}/etc/hosts"),
        ]
    )
    assert own_container(info) is None
    assert own_container("") is None


class Api:
    """docker-py's APIClient.remove_container answering each of ``answers`` in turn."""

    def __init__(self, *answers: int) -> None:
        self.answers, self.calls = list(answers), 0

    def remove_container(self, container: str, **options: object) -> None:
        assert options == {"force": True, "v": True}
        self.calls += 1
        status = self.answers.pop(0)
        if status == 204:
            return
        response = requests.Response()
        response.status_code = status
        explanation = {
            404: "No such container",
            409: "removal of container is already in progress",
            403: "forbidden",
            500: 'driver "overlay2" failed to remove root filesystem: directory not empty',
        }[status]
        error = docker.errors.NotFound if status == 404 else docker.errors.APIError
        raise error("remove", response=response, explanation=explanation)


def test_a_racing_removal_is_completed_by_a_later_one():
    """Seen in CI: an episode's removal and a Ctrl-C sweep of the same container; the engine
    answered 500 to one and left the container dead."""
    api = Api(500, 500, 204)
    assert remove_container(api, "c") is True  # type: ignore[arg-type]
    assert api.calls == 3


def test_gone_or_in_progress_is_not_an_error_and_other_failures_are():
    assert remove_container(Api(404), "c") is False  # type: ignore[arg-type]
    assert remove_container(Api(409), "c") is False  # type: ignore[arg-type]
    with pytest.raises(docker.errors.APIError, match="root filesystem"):
        remove_container(Api(500, 500), "c", attempts=2)  # type: ignore[arg-type]
    with pytest.raises(docker.errors.APIError):
        remove_container(Api(403), "c")  # type: ignore[arg-type]
