"""Which container a server runs in, from its mount table: never another container's."""

from __future__ import annotations

from harbor_openenv.sandbox import container_id

OURS, OTHER = "a" * 64, "b" * 64


def test_only_our_own_etc_mounts_name_our_container():
    inside = (
        f"1 0 254:0 / / rw - overlay overlay rw\n"
        f"2 1 254:0 /var/lib/docker/containers/{OURS}/hostname /etc/hostname rw - ext4 /dev/vda\n"
    )
    assert container_id(inside) == OURS
    # On a host running the engine: other containers' files at their overlay folders.
    host = (
        "1 0 254:0 / / rw - ext4 /dev/vda rw\n"
        f"2 1 254:0 /var/lib/docker/containers/{OTHER}/resolv.conf"
        f" /var/lib/docker/overlay2/{'c' * 64}/merged/etc/resolv.conf rw - ext4 /dev/vda rw\n"
    )
    assert container_id(host) is None
    assert container_id(host + inside) == OURS
    assert container_id("") is None
