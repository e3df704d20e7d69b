"""Byte-for-byte copy of a task folder and a `sha256sum`-compatible checksum manifest.

Standard library only: the template's copy task imports this module inside copier's own Python,
where neither openenv nor the server extras are installed.
Slightly over ~400 lines for that reason: the copy, the manifest and their checks must stay in
this one standard-library module that copier's Python can import alone.

The manifest is a text file of `<sha256 hex>  <path>` lines, sorted by path, with paths relative to
the manifest's directory, so `sha256sum -c tasks.sha256` run next to it checks every file. File
names holding a backslash, newline or carriage return are escaped the way GNU `sha256sum` does it
(a leading backslash on the line).

The manifest also records which files are executable, the one mode bit git keeps: a header line
(`MODES_HEADER`) and one `# +x <path>` line per executable file, after the checksums. sha256sum
skips lines that start with `#`, so `sha256sum -c` still checks the file. A manifest without the
header (written before modes were recorded) says nothing about modes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from operator import attrgetter
from pathlib import Path

from harbor_openenv.errors import HarborOpenEnvError

__all__ = [
    "MANIFEST_NAME",
    "CopiedFiles",
    "CopyError",
    "copy_tasks",
    "executable",
    "file_sha256",
    "listed_files",
    "read_manifest",
    "read_modes",
    "verify_manifest",
    "write_manifest",
]

MANIFEST_NAME = "tasks.sha256"
MODES_HEADER = "# harbor-openenv manifest: a '# +x PATH' line marks an executable file"
EXEC_MARK = "# +x "
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


def file_sha256(path: Path) -> str:
    """Return the hex SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


def executable(path: Path | str) -> bool:
    """Whether the file (what a link points to) has its owner's execute bit, the bit git keeps."""
    return bool(os.stat(path).st_mode & stat.S_IXUSR)


def _walk(top: str) -> Iterator[tuple[str, os.DirEntry[str], str]]:
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
    for kind, entry, rel in _walk(os.fspath(src)):
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


def _escape(name: str) -> tuple[str, str]:
    """Return (line prefix, escaped name) as GNU sha256sum writes names with odd characters."""
    if "\\" not in name and "\n" not in name and "\r" not in name:
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


def _names_prefix(tasks_dir: Path, manifest: Path) -> str:
    """tasks_dir relative to the manifest's directory, as manifest paths start ("" for itself)."""
    base = manifest.parent.resolve()
    prefix = Path(os.path.relpath(os.path.abspath(tasks_dir), base)).as_posix()
    return "" if prefix == "." else prefix + "/"


def listed_files(tasks_dir: Path, manifest: Path) -> list[tuple[str, Path]]:
    """The files a manifest lists for tasks_dir: (path relative to the manifest, absolute path)."""
    prefix = _names_prefix(tasks_dir, manifest)
    files = []
    for kind, entry, rel in _walk(os.path.abspath(tasks_dir)):
        if kind == "dir" or (kind == "link" and not os.path.isfile(entry.path)):
            continue  # sha256sum hashes what a link points to; links to directories have no hash
        name = prefix + rel
        if name != manifest.name:
            files.append((name, Path(entry.path)))
    return sorted(files)


def write_manifest(
    tasks_dir: Path, manifest: Path, digests: Mapping[str, str] | None = None
) -> int:
    """Write a `sha256sum`-compatible manifest of every file under tasks_dir; return the count.

    Paths are relative to the manifest's directory (`tasks/<task>/task.toml` for the usual layout).
    digests, when given, is what `copy_tasks` returned for this tasks_dir: the files are then not
    read again (nor their modes, from a `CopiedFiles`). Executable files get a `# +x` line (see
    the module's docstring).
    """
    tasks_dir, manifest = Path(tasks_dir), Path(manifest)
    prefix = _names_prefix(tasks_dir, manifest)
    if digests is None:
        entries = [(name, file_sha256(path)) for name, path in listed_files(tasks_dir, manifest)]
    else:
        entries = sorted((prefix + rel, digest) for rel, digest in digests.items())
        entries = [(name, digest) for name, digest in entries if name != manifest.name]
    if isinstance(digests, CopiedFiles):
        marked = {prefix + rel for rel in digests.executables}
    else:
        base = os.fspath(manifest.parent)
        marked = {rel for rel, _ in entries if executable(os.path.join(base, rel))}
    lines, marks = [MODES_HEADER + "\n"], []
    for rel, digest in entries:
        escape, name = _escape(rel)
        lines.append(f"{escape}{digest}  {name}\n")
        if rel in marked:
            marks.append(f"{EXEC_MARK}{escape}{name}\n")
    lines += marks
    tmp = manifest.with_name(manifest.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        f.writelines(lines)
    os.replace(tmp, manifest)
    return len(entries)


def read_manifest(manifest: Path) -> tuple[dict[str, str], list[str]]:
    """The manifest's ``{path: sha256}`` entries and the lines it could not read."""
    entries: dict[str, str] = {}
    problems: list[str] = []
    text = manifest.read_text(encoding="utf-8", errors="surrogateescape")
    for number, line in enumerate(text.split("\n"), 1):
        if not line or line.startswith("#"):  # sha256sum skips these too; modes are read_modes'
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


def read_modes(manifest: Path) -> set[str] | None:
    """The paths the manifest marks executable; None for a manifest that records no modes."""
    text = Path(manifest).read_text(encoding="utf-8", errors="surrogateescape")
    lines = text.split("\n")
    if lines[0] != MODES_HEADER:
        return None
    marked = set()
    for line in lines[1:]:
        if line.startswith(EXEC_MARK):
            name = line[len(EXEC_MARK) :]
            marked.add(_unescape(name[1:]) if name.startswith("\\") else name)
    return marked


def verify_manifest(manifest: Path, under: str | None = None, *, modes: bool = False) -> list[str]:
    """Check the files listed in manifest; return readable problems, empty when all match.

    Reports changed and missing files, and extra files under the top-level folders the manifest
    covers (usually just `tasks/`). With ``under`` (a folder relative to the manifest, such as
    ``tasks/hello-world``), only that folder is checked. With ``modes``, a file whose execute bit
    differs from what the manifest records is reported too (nothing for manifests without modes);
    off by default, as uploads that drop mode bits should not stop a server.
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
    marked = read_modes(manifest) if modes else None
    for rel, digest in sorted(entries.items()):
        path = base / rel
        if not path.is_file():
            problems.append(f"missing: {rel}")
        elif file_sha256(path) != digest:
            problems.append(f"changed: {rel} (sha256 differs from {manifest.name})")
        elif marked is not None and executable(path) != (rel in marked):
            was = "executable" if rel in marked else "not executable"
            problems.append(f"mode changed: {rel} ({was} in {manifest.name})")
    roots = {rel.split("/", 1)[0] for rel in entries if "/" in rel and not rel.startswith("../")}
    for root in sorted(roots) if under is None else ():
        if (base / root).is_dir():
            for rel, _ in listed_files(base / root, manifest):
                if rel not in entries:
                    problems.append(f"extra: {rel} (not in {manifest.name})")
    return problems


def main(argv: list[str] | None = None) -> int:
    """`python -m harbor_openenv.datasets.manifest [MANIFEST]`: verify, print problems, exit 1
    if any."""
    args = sys.argv[1:] if argv is None else argv
    manifest = Path(args[0] if args else MANIFEST_NAME)
    problems = verify_manifest(manifest, modes=True)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"{manifest}: all files match")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
