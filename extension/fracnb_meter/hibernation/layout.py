"""Where saved states live, and the file rules every reader and writer follows.

    ~/.local/state/fracnb/hibernation/          (0700; $XDG_STATE_HOME is honoured)
        <server>/                               ("default" for the unnamed server)
            <key>/                              one entry per notebook: sha256 of its file path
                manifest.json                   the commit point: names the generation below
                restored.json                   written by a restore (the offer is not shown again)
                <generation>/objects.pkl        the pickle stream, one record per variable
                <generation>/arrays.bin         the arrays' bytes (pickle protocol 5 buffers)

A save writes a new generation directory, fsyncs it, then replaces ``manifest.json`` with
``os.replace`` (atomic on POSIX); only then is the previous generation removed. A crash or a full
disk at any moment leaves either the old manifest with its complete generation, or the new one.

Every file and directory is created 0600/0700. Readers open with O_NOFOLLOW and refuse anything
that is a symlink, not owned by this user, or writable by group or others (:class:`UnsafeStateError`):
loading a pickle runs code, so only the user's own, untouched files are ever loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

MANIFEST = "manifest.json"
RESTORED = "restored.json"
OBJECTS = "objects.pkl"
ARRAYS = "arrays.bin"
DEFAULT_SERVER = "default"
MANIFEST_MAX_BYTES = 16 << 20  # a manifest lists variables, not data: anything bigger is not ours
PRIVATE_FILE, PRIVATE_DIR = 0o600, 0o700


class UnsafeStateError(Exception):
    """A saved state's file that must not be loaded: a symlink, someone else's, or writable by others."""


class DamagedStateError(ValueError):
    """A saved state's file that is cut short or garbled: the reason names the file."""


def state_root(env: Mapping[str, str]) -> Path:
    """The hidden folder of the user's home that holds every server's saved states."""
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(base) / "fracnb" / "hibernation"


def server_dir(env: Mapping[str, str]) -> Path:
    """This server's folder: JupyterHub's server name, or 'default' for the unnamed server."""
    name = env.get("JUPYTERHUB_SERVER_NAME", "").strip() or DEFAULT_SERVER
    return state_root(env) / safe_component(name)


def safe_component(name: str) -> str:
    """A server name as one path component (JupyterHub names are already tame; this makes sure)."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".")
    return cleaned or DEFAULT_SERVER


def entry_key(notebook_file: str) -> str:
    """The entry of a notebook: its absolute file path, hashed (paths may hold any character)."""
    return hashlib.sha256(os.path.normpath(notebook_file).encode()).hexdigest()[:32]


def find_entry(env: Mapping[str, str], notebook_file: str) -> Path:
    """The folder of ``notebook_file``'s saved states under this server's."""
    return server_dir(env) / entry_key(notebook_file)


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents as 0700 (existing ones are left as they are)."""
    missing = []
    for parent in [path, *path.parents]:
        if parent.exists():
            break
        missing.append(parent)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=PRIVATE_DIR)


def check_private(info: os.stat_result, path: Path, *, directory: bool = False) -> None:
    """Raise UnsafeStateError unless ``info`` (an lstat or fstat) is this user's own, untouched file."""
    kind = "folder" if directory else "file"
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeStateError(f"refusing the saved state: {path} is a symbolic link, not a {kind}")
    if (stat.S_ISDIR(info.st_mode)) != directory:
        raise UnsafeStateError(f"refusing the saved state: {path} is not a {kind}")
    if info.st_uid != os.getuid():
        raise UnsafeStateError(
            f"refusing the saved state: {path} belongs to user id {info.st_uid}, not to you ({os.getuid()})"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeStateError(
            f"refusing the saved state: {path} can be written by others (mode {stat.S_IMODE(info.st_mode):o});"
            " only your own files, writable by you alone, are loaded"
        )


def check_private_dirs(path: Path, up_to: Path) -> None:
    """Check every folder from ``up_to`` down to ``path`` (lstat, so a symlinked folder is refused)."""
    chain = [path, *[p for p in path.parents if p == up_to or up_to in p.parents]]
    for directory in reversed(chain):
        check_private(os.lstat(directory), directory, directory=True)


@contextmanager
def open_private(path: Path) -> Iterator[IO[bytes]]:
    """Open a state file for reading, refusing symlinks and files that are not the user's own."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        if os.path.islink(path):
            raise UnsafeStateError(f"refusing the saved state: {path} is a symbolic link, not a file") from None
        raise error
    with os.fdopen(fd, "rb", buffering=0) as stream:
        check_private(os.fstat(fd), path)
        yield stream


def read_manifest(entry: Path, root: Path) -> dict[str, Any]:
    """An entry's manifest, parsed (JSON only: listing states never unpickles anything)."""
    check_private_dirs(entry, root)
    with open_private(entry / MANIFEST) as stream:
        raw = stream.read(MANIFEST_MAX_BYTES + 1)
    if len(raw) > MANIFEST_MAX_BYTES:
        raise ValueError(f"{entry / MANIFEST} is larger than {MANIFEST_MAX_BYTES} bytes")
    try:
        document = json.loads(raw)
    except ValueError as error:
        raise DamagedStateError(
            f"the saved state is damaged: {entry / MANIFEST} is not complete JSON ({error}); nothing can be"
            " restored from it, discard it"
        ) from None
    if not isinstance(document, dict):
        raise DamagedStateError(f"the saved state is damaged: {entry / MANIFEST} is not a JSON object; discard it")
    return document


def read_restored(entry: Path) -> dict[str, Any] | None:
    """When the entry was last restored, or None (a missing or unreadable mark means never)."""
    try:
        with open_private(entry / RESTORED) as stream:
            document = json.loads(stream.read(1 << 16))
    except (OSError, ValueError, UnsafeStateError):
        return None
    return document if isinstance(document, dict) else None


def write_private_file(path: Path, data: bytes) -> None:
    """Write ``path`` through a 0600 temporary file, fsynced, then renamed over it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def generations(entry: Path) -> list[Path]:
    """The generation folders in an entry (complete or not)."""
    if not entry.is_dir():
        return []
    return [child for child in entry.iterdir() if child.is_dir() and not child.is_symlink()]


def remove_generations(entry: Path, keep: str | None) -> None:
    """Remove every generation except ``keep``: the replaced one, and any a crash left unfinished."""
    for generation in generations(entry):
        if generation.name != keep:
            shutil.rmtree(generation, ignore_errors=True)


def entries(server: Path) -> list[Path]:
    """The entries of one server's folder (a missing folder has none)."""
    if not server.is_dir():
        return []
    return sorted(child for child in server.iterdir() if child.is_dir() and not child.is_symlink())


def refuse_links(path: Path, up_to: Path) -> None:
    """Raise UnsafeStateError when ``path`` or a folder between ``up_to`` and it is a symbolic link."""
    chain = [path, *[p for p in path.parents if p == up_to or up_to in p.parents]]
    for item in reversed(chain):
        if item.is_symlink():
            raise UnsafeStateError(f"refusing to delete through {item}: it is a symbolic link, not a folder")


def discard(entry: Path, root: Path) -> None:
    """Remove a saved state: the manifest first, so a half-removed entry is never offered.

    Never through a symbolic link (UnsafeStateError): the entry and every folder above it up to
    ``root`` must be real folders. A state refused for its owner or mode can still be discarded."""
    refuse_links(entry, root)
    (entry / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(entry, ignore_errors=True)
