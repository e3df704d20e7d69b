"""Byte-for-byte copy of a task folder and a `sha256sum`-compatible checksum manifest.

Standard library only: the template's copy task imports this module inside copier's own Python,
where neither openenv nor the server extras are installed.

The manifest is a text file of `<sha256 hex>  <path>` lines, sorted by path, with paths relative to
the manifest's directory, so `sha256sum -c tasks.sha256` run next to it checks every file. File
names holding a backslash, newline or carriage return are escaped the way GNU `sha256sum` does it
(a leading backslash on the line).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "MANIFEST_NAME",
    "CopyError",
    "copy_tasks",
    "file_sha256",
    "listed_files",
    "read_manifest",
    "verify_manifest",
    "write_manifest",
]

MANIFEST_NAME = "tasks.sha256"
CHUNK_SIZE = 1 << 20  # hash in 1 MiB chunks so big files never sit in memory whole


class CopyError(Exception):
    """The task folder cannot be copied as it is (a symlink leaves it, a special file, ...)."""


def file_sha256(path: Path) -> str:
    """Return the hex SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


def _entries(src: Path) -> Iterator[tuple[str, Path]]:
    """Yield (kind, path) for everything under src: kind is "dir", "file", "link" or "other"."""
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in list(dirs):
            path = Path(root, name)
            if (
                path.is_symlink()
            ):  # os.walk lists links to directories here but does not follow them
                dirs.remove(name)
                yield "link", path
            else:
                yield "dir", path
        for name in sorted(files):
            path = Path(root, name)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                yield "link", path
            elif stat.S_ISREG(mode):
                yield "file", path
            else:
                yield "other", path


def _check_link(src_real: str, link: Path, shown: str) -> str:
    """Return the link's target if it is relative and stays inside the dataset, else raise."""
    target = os.readlink(link)
    if os.path.isabs(target):
        raise CopyError(
            f"{shown}: symlink has an absolute target {target!r}; "
            "make it relative (inside the dataset) or replace it with the file"
        )
    resolved = os.path.realpath(os.path.join(link.parent, target))
    if os.path.commonpath([src_real, resolved]) != src_real:
        raise CopyError(
            f"{shown}: symlink to {target!r} points outside the dataset; "
            "replace it with a copy of the file it points to"
        )
    return target


def copy_tasks(src: Path, dst: Path, progress: Callable[[int, int], None] | None = None) -> None:
    """Copy every file under src to dst, byte for byte, keeping mode bits and in-tree symlinks.

    dst must not exist or be an empty directory. The copy is made in a temporary sibling directory
    that is renamed to dst at the end, so a failure leaves nothing half written. progress, if given,
    is called as progress(files_done, files_total) after each file.
    """
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise CopyError(f"{src}: not a directory")
    if dst.is_symlink() or (dst.exists() and (not dst.is_dir() or any(dst.iterdir()))):
        raise CopyError(f"{dst}: already exists and is not an empty directory")
    src_real = os.path.realpath(src)
    plan: list[tuple[str, Path, str]] = []  # (kind, source path, relative posix path)
    for kind, path in _entries(src):
        rel = path.relative_to(src).as_posix()
        if kind == "other":
            raise CopyError(f"{rel}: not a regular file, directory or symlink; remove it")
        if kind == "link":
            _check_link(src_real, path, rel)
        plan.append((kind, path, rel))
    total = sum(kind != "dir" for kind, _, _ in plan)

    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.partial-", dir=dst.parent))
    try:
        done = 0
        for kind, path, rel in plan:
            out = tmp / rel
            if kind == "dir":
                out.mkdir()
                continue
            if kind == "link":
                os.symlink(os.readlink(path), out)
            else:
                shutil.copy2(path, out)  # bytes, mode bits (exec bits included) and times
            done += 1
            if progress is not None:
                progress(done, total)
        # Directory modes last, so a read-only directory does not block the files copied into it.
        for kind, path, rel in reversed(plan):
            if kind == "dir":
                shutil.copystat(path, tmp / rel)
        shutil.copymode(src, tmp)
        if dst.exists():
            dst.rmdir()
        os.rename(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _escape(name: str) -> tuple[str, str]:
    """Return (line prefix, escaped name) as GNU sha256sum writes names with odd characters."""
    if not any(c in name for c in "\\\n\r"):
        return "", name
    escaped = name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\", escaped


def _unescape(name: str) -> str:
    out, i = [], 0
    while i < len(name):
        c = name[i]
        if c == "\\" and i + 1 < len(name):
            out.append({"\\": "\\", "n": "\n", "r": "\r"}.get(name[i + 1], name[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def listed_files(tasks_dir: Path, manifest: Path) -> list[tuple[str, Path]]:
    """The files a manifest lists for tasks_dir: (path relative to the manifest, absolute path)."""
    base = manifest.parent.resolve()
    manifest_abs = base / manifest.name
    files = []
    for kind, path in _entries(tasks_dir):
        if kind == "dir" or (kind == "link" and not path.is_file()):
            continue  # sha256sum hashes what a link points to; links to directories have no hash
        path = Path(os.path.abspath(path))
        if path == manifest_abs:
            continue
        files.append((Path(os.path.relpath(path, base)).as_posix(), path))
    return sorted(files)


def write_manifest(tasks_dir: Path, manifest: Path) -> int:
    """Write a `sha256sum`-compatible manifest of every file under tasks_dir; return the count.

    Paths are relative to the manifest's directory (`tasks/<task>/task.toml` for the usual layout).
    """
    tasks_dir, manifest = Path(tasks_dir), Path(manifest)
    files = listed_files(tasks_dir, manifest)
    lines = []
    for rel, path in files:
        prefix, name = _escape(rel)
        lines.append(f"{prefix}{file_sha256(path)}  {name}\n")
    tmp = manifest.with_name(manifest.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        f.writelines(lines)
    os.replace(tmp, manifest)
    return len(files)


def read_manifest(manifest: Path) -> tuple[dict[str, str], list[str]]:
    """The manifest's ``{path: sha256}`` entries and the lines it could not read."""
    entries: dict[str, str] = {}
    problems: list[str] = []
    text = manifest.read_text(encoding="utf-8", errors="surrogateescape")
    for number, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        escaped = line.startswith("\\")
        if escaped:
            line = line[1:]
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            problems.append(f"{manifest.name} line {number}: not a '<sha256>  <path>' line")
            continue
        entries[_unescape(name) if escaped else name] = digest
    return entries, problems


def verify_manifest(manifest: Path, under: str | None = None) -> list[str]:
    """Check the files listed in manifest; return readable problems, empty when all match.

    Reports changed and missing files, and extra files under the top-level folders the manifest
    covers (usually just `tasks/`). With ``under`` (a folder relative to the manifest, such as
    ``tasks/hello-world``), only that folder is checked.
    """
    manifest = Path(manifest)
    if not manifest.is_file():
        return [f"{manifest}: manifest not found"]
    base = manifest.parent
    entries, problems = read_manifest(manifest)
    if under is not None:
        prefix = under.strip("/") + "/"
        entries = {rel: digest for rel, digest in entries.items() if rel.startswith(prefix)}
        extras = listed_files(base / prefix, manifest) if (base / prefix).is_dir() else []
        problems += [
            f"extra: {rel} (not in {manifest.name})" for rel, _ in extras if rel not in entries
        ]
        if not entries and not extras:
            problems.append(f"{under}: not in {manifest.name}")
    for rel, digest in sorted(entries.items()):
        path = base / rel
        if not path.is_file():
            problems.append(f"missing: {rel}")
        elif file_sha256(path) != digest:
            problems.append(f"changed: {rel} (sha256 differs from {manifest.name})")
    roots = {rel.split("/", 1)[0] for rel in entries if "/" in rel and not rel.startswith("../")}
    for root in sorted(roots) if under is None else ():
        if (base / root).is_dir():
            for rel, _ in listed_files(base / root, manifest):
                if rel not in entries:
                    problems.append(f"extra: {rel} (not in {manifest.name})")
    return problems


def main(argv: list[str] | None = None) -> int:
    """`python -m harbor_openenv.manifest [MANIFEST]`: verify, print problems, exit 1 if any."""
    args = sys.argv[1:] if argv is None else argv
    manifest = Path(args[0] if args else MANIFEST_NAME)
    problems = verify_manifest(manifest)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"{manifest}: all files match")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
