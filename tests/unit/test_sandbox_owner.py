"""Owner identities (no engine needed): which container, if any, a server runs in."""

from __future__ import annotations

from harbor_openenv.sandbox.owner import own_container

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
