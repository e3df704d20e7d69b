"""The `sha256sum`-compatible checksum manifest of a tasks folder (the copy is :mod:`.task_copy`).

Standard library only: the template's copy task imports this module inside copier's own Python,
where neither openenv nor the server extras are installed.

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
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

from harbor_openenv.datasets.task_copy import CHUNK_SIZE, CopiedFiles, walk

__all__ = [
    "MANIFEST_NAME",
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
    for kind, entry, rel in walk(os.path.abspath(tasks_dir)):
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
