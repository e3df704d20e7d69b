"""TLS certificates given as contents (a Space's secrets) become a private DOCKER_CERT_PATH."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harbor_openenv.sandbox import engine


def test_contents_are_written_privately_and_named_by_dockers_settings(monkeypatch):
    monkeypatch.delenv("DOCKER_CERT_PATH", raising=False)
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    folder = engine.use_tls_contents("CA\n", "CERT", "-----KEY-----\n\n")
    assert os.environ["DOCKER_CERT_PATH"] == str(folder)
    assert os.environ["DOCKER_TLS_VERIFY"] == "1"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = {p.name: p for p in Path(folder).iterdir()}
    assert sorted(files) == ["ca.pem", "cert.pem", "key.pem"]
    assert files["key.pem"].read_text() == "-----KEY-----\n"
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files.values())
    for path in files.values():
        path.unlink()
    folder.rmdir()
