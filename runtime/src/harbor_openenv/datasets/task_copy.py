"""The byte-for-byte copy of a tasks folder: mode bits and in-tree symlinks kept, every file
hashed as it is copied (what ``manifest.write_manifest`` lists), the copy renamed into place whole.

Standard library only, as :mod:`.manifest`: the template's copy task imports both inside copier's
own Python, where neither openenv nor the server extras are installed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from operator import attrgetter
from pathlib import Path

from harbor_openenv.errors import HarborOpenEnvError

CHUNK_SIZE = 1 << 20  # hash in 1 MiB chunks so big files never sit in memory whole
COPY_THREADS = 2  # one copies while the other waits on the disk (4 measured no better on 2 cores)


class CopyError(HarborOpenEnvError):
    """The task folder cannot be copied as it is (a symlink leaves it, a special file, ...)."""


class CopiedFiles(dict[str, str]):
    """What `copy_tasks` copied: ``{relative path: sha256}``, and which of them are executable.

    Both are read while copying, so `write_manifest` needs neither the files' bytes nor their
    modes again.
    """

    def __init__(self) -> None:
        super().__init__()
        self.executables: set[str] = set()


def walk(top: str) -> Iterator[tuple[str, os.DirEntry[str], str]]:
    """Yield (kind, entry, relative posix path) for everything under top, parents first.

    kind is "dir", "file", "link" or "other", read from the directory listing itself (no stat
    per file); symlinks, to directories too, are never followed.
    """
    pending = [""]
    while pending:
        folder = pending.pop()
        with os.scandir(f"{top}/{folder}" if folder else top) as listing:
            entries = sorted(listing, key=attrgetter("name"))
        subfolders = []
        for entry in entries:
            rel = f"{folder}/{entry.name}" if folder else entry.name
            if entry.is_symlink():
                kind = "link"
            elif entry.is_dir(follow_symlinks=False):
                kind = "dir"
                subfolders.append(rel)
            elif entry.is_file(follow_symlinks=False):
                kind = "file"
            else:
                kind = "other"
            yield kind, entry, rel
        pending.extend(reversed(subfolders))


def _check_link(src_real: str, link: str, shown: str) -> str:
    """Return the real path a link resolves to if it is relative and stays inside the dataset."""
    target = os.readlink(link)
    if os.path.isabs(target):
        raise CopyError(
            f"{shown}: symlink has an absolute target {target!r}; "
            "make it relative (inside the dataset) or replace it with the file"
        )
    resolved = os.path.realpath(os.path.join(os.path.dirname(link), target))
    if os.path.commonpath([src_real, resolved]) != src_real:
        raise CopyError(
            f"{shown}: symlink to {target!r} points outside the dataset; "
            "replace it with a copy of the file it points to"
        )
    return resolved


def _copy_file(src: str, dst: str, buffer: memoryview) -> tuple[str, int]:
    """Copy src's bytes and mode bits to the new file dst, hashing them on the way.

    One read of each byte (into a reused buffer), so the copy and its checksum cost one pass.
    Returns the hex SHA-256 and the mode bits.
    """
    digest = hashlib.sha256()
    source = os.open(src, os.O_RDONLY)
    try:
        mode = stat.S_IMODE(os.fstat(source).st_mode)
        target = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            while size := os.readv(source, (buffer,)):
                chunk = buffer[:size]
                digest.update(chunk)
                while chunk:
                    chunk = chunk[os.write(target, chunk) :]
            # Exactly the source's bits, whatever the umask; a chmod only where the umask (or a
            # write, for set-user-ID bits) took some away, since each costs a journal entry.
            if stat.S_IMODE(os.fstat(target).st_mode) != mode:
                os.fchmod(target, mode)
        finally:
            os.close(target)
    finally:
        os.close(source)
    return digest.hexdigest(), mode


def _make_folder(path: str, mode: int) -> None:
    """mkdir, when another thread may not have made the parent yet, or made this one for it."""
    try:
        os.mkdir(path, mode)
    except FileNotFoundError:
        os.makedirs(path, mode, exist_ok=True)
    except FileExistsError:
        pass


def _copy_folders(
    folders: list[tuple[str, int, list[tuple[str, str]]]],
    tmp: str,
    progress: Callable[[int, int], None] | None,
    total: int,
) -> CopiedFiles:
    """Make each folder in tmp and copy its files into it, on COPY_THREADS threads; the digests.

    folders holds (relative path, mode bits, [(source path, relative path) of its files]),
    parents first. File I/O and hashing release the GIL, so one thread copies while another waits
    on the disk. The first failure stops every thread and is raised once all have stopped.
    """
    digests = CopiedFiles()
    lock = threading.Lock()
    pending = iter(folders)
    stop = threading.Event()
    failures: list[BaseException] = []

    def worker() -> None:
        buffer = memoryview(bytearray(CHUNK_SIZE))
        while not stop.is_set():
            with lock:
                item = next(pending, None)
            if item is None:
                return
            folder, mode, files = item
            try:
                if folder:
                    _make_folder(f"{tmp}/{folder}", mode | 0o700)  # ours to fill until the end
                for path, rel in files:
                    digest, mode = _copy_file(path, f"{tmp}/{rel}", buffer)
                    with lock:
                        digests[rel] = digest
                        if mode & stat.S_IXUSR:
                            digests.executables.add(rel)
                        if progress is not None:
                            progress(len(digests), total)
            except BaseException as exc:  # raised again by the calling thread
                failures.append(exc)
                stop.set()
                return

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(COPY_THREADS - 1)]
    for thread in threads:
        thread.start()
    try:
        worker()
    finally:  # also when interrupted: the others finish the folder in hand and stop
        stop.set()
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
    return digests


def copy_tasks(
    src: Path, dst: Path, progress: Callable[[int, int], None] | None = None
) -> CopiedFiles:
    """Copy every file under src to dst, byte for byte, keeping mode bits and in-tree symlinks.

    Returns the SHA-256 of every file `write_manifest` lists (regular files and symlinks to
    files, by path relative to dst) and which are executable, read while copying: pass it to
    `write_manifest` so the copy is not read again. Modification times are not kept (neither
    `cp -r` nor git keeps them).

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
    # (relative path, mode bits, its files), parents first; "" is the top folder.
    folders: list[tuple[str, int, list[tuple[str, str]]]] = [
        ("", stat.S_IMODE(src.stat().st_mode), [])
    ]
    files_in = {"": folders[0][2]}
    links: list[tuple[str, str, str]] = []  # (source path, relative path, real path it resolves to)
    for kind, entry, rel in walk(os.fspath(src)):
        if kind == "dir":
            folders.append((rel, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode), []))
            files_in[rel] = folders[-1][2]
        elif kind == "file":
            files_in[rel.rpartition("/")[0]].append((entry.path, rel))
        elif kind == "link":
            links.append((entry.path, rel, _check_link(src_real, entry.path, rel)))
        else:
            raise CopyError(f"{rel}: not a regular file, directory or symlink; remove it")
    copied = sum(len(files) for _, _, files in folders)
    total = copied + len(links)

    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{dst.name}.partial-", dir=dst.parent)
    try:
        digests = _copy_folders(folders, tmp, progress, total)
        for done, (path, rel, resolved) in enumerate(links, copied + 1):
            os.symlink(os.readlink(path), f"{tmp}/{rel}")
            if os.path.isfile(resolved):  # sha256sum hashes what a link to a file points to
                target = os.path.relpath(resolved, src_real)
                digests[rel] = digests[target]
                if target in digests.executables:
                    digests.executables.add(rel)
            if progress is not None:
                progress(done, total)
        # Folder modes last, so a read-only folder does not block the files copied into it.
        for rel, mode, _ in reversed(folders):
            path = f"{tmp}/{rel}" if rel else tmp
            if stat.S_IMODE(os.stat(path).st_mode) != mode:
                os.chmod(path, mode)
        if dst.exists():
            dst.rmdir()
        os.rename(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return digests
