"""The result cache: each file's plain result, keyed by its bytes and everything that shapes it.

An entry holds what checking one file gives before the project-wide join (findings,
conditional findings, the step summary), so a warm run joins cached summaries without
parsing anything, and without importing libcst. Entries are written atomically (a
temporary file, then ``os.replace``), so concurrent runs never see half an entry; one
that cannot be read back (truncated, corrupt, another version's) is a miss, and the
file is checked and its entry rewritten. The directory is bounded: past ``max_entries``
the least recently used entries are removed.

An entry is a pickle, and unpickling runs code: a cache directory someone else made (a
cloned repository's ``.torchlint_cache``, a shared ``$TORCHLINT_CACHE_DIR``) must never
be unpickled. So every entry carries an HMAC-SHA256 of its key and payload under a
per-user secret (``secret_file``: 32 random bytes, mode 0600, in the user's cache
directory), checked before anything is unpickled; an entry that fails it is a miss.
Without a usable secret the cache is neither read nor written.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import os
import pickle
import re
import stat
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

from torchlint import __version__, catalogue
from torchlint.analysis.summary import FileSummary
from torchlint.config import Config
from torchlint.engine.discover import SourceFile
from torchlint.engine.results import Pending, Conditional, FileResult, InStepIfCalled
from torchlint.engine.suppress import PerFileIgnores, selected_codes
from torchlint.findings import Finding

CACHE_DIR_ENV = "TORCHLINT_CACHE_DIR"
DEFAULT_DIR_NAME = ".torchlint_cache"
MAX_ENTRIES = 20_000
_MAGIC = b"torchlint-cache 3\n"  # 2: impacts and the functions that may raise them; 3: signed
_ENTRIES = "entries-v1"
_TOUCH_AFTER_S = 24 * 3600  # a hit refreshes its entry's age at most once a day
_STALE_TEMP_S = 3600


def cache_dir(root: Path, given: Path | None = None) -> Path:
    """``--cache-dir``, else ``$TORCHLINT_CACHE_DIR``, else ``.torchlint_cache`` in ``root``."""
    if given is not None:
        return given
    from_env = os.environ.get(CACHE_DIR_ENV)
    return Path(from_env) if from_env else root / DEFAULT_DIR_NAME


def content_digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=20).hexdigest()


@dataclass(frozen=True, slots=True)
class FileKey:
    """Everything besides the file's bytes that its result depends on."""

    display: str  # how findings name the file
    absolute: str  # how its step summary names it
    codes: tuple[str, ...]  # the rules run on it (the selection less its per-file ignores)
    ignored: tuple[str, ...]
    options: tuple[object, ...]


class Cache:
    def __init__(self, directory: Path, max_entries: int = MAX_ENTRIES) -> None:
        self.directory = directory
        self.entries = directory / _ENTRIES
        self.max_entries = max_entries
        self.salt = _engine_salt()
        self.secret = user_secret()
        self.writable = self.secret is not None  # unsigned entries are neither written nor read
        self.written = 0

    def key(self, file: FileKey, digest: str) -> str:
        material = repr((self.salt, digest, file)).encode("utf-8", "surrogatepass")
        return hashlib.sha256(material).hexdigest()

    def load(self, key: str) -> FileResult | None:
        """The stored result for ``key``; None when absent, unreadable or not ours."""
        if self.secret is None:
            return None
        path = self.entries / key
        try:
            with open(path, "rb") as handle:
                age = time.time() - os.fstat(handle.fileno()).st_mtime
                data = handle.read()
        except OSError:
            return None
        result = _decode(data, key, self.secret)
        if result is not None and age > _TOUCH_AFTER_S:
            _touch(path)  # recently used entries survive pruning
        return result

    def store(self, key: str, result: FileResult) -> None:
        """Write ``result`` (plain: no tree, no fix nodes) atomically; never raises."""
        if not self.writable:
            return
        body = pickle.dumps((result.findings, result.conditional, result.summary, result.in_functions, result.pending),
                            protocol=pickle.HIGHEST_PROTOCOL)
        payload = _header(key) + _signature(self.secret, key, body) + body  # type: ignore[arg-type]
        try:
            self._prepare()
            import tempfile  # only when writing: a run that reads the cache never loads it

            handle = tempfile.NamedTemporaryFile(dir=self.entries, prefix=".tmp-", delete=False)
            try:
                with handle:
                    handle.write(payload)
                os.replace(handle.name, self.entries / key)
            except BaseException:
                _remove(Path(handle.name))
                raise
        except OSError:
            self.writable = False  # a read-only or full disk costs speed, never the run
            return
        self.written += 1

    def prune(self) -> int:
        """Remove the least recently used entries beyond the bound, and stale temporary
        files of interrupted runs; returns how many files were removed."""
        if not self.written:
            return 0  # nothing was added: the bound still holds
        now, removed = time.time(), 0
        entries = []
        try:
            with os.scandir(self.entries) as found:
                for entry in found:
                    try:
                        mtime = entry.stat().st_mtime
                    except OSError:
                        continue
                    if entry.name.startswith(".tmp-"):
                        if now - mtime > _STALE_TEMP_S:
                            removed += _remove(Path(entry.path))
                    elif _ENTRY_NAME.fullmatch(entry.name):  # only what this cache names so: never another's files
                        entries.append((mtime, entry.path))
        except OSError:
            return removed
        if len(entries) > self.max_entries:
            entries.sort()
            keep = self.max_entries * 4 // 5  # room for the next runs before pruning again
            for _, path in entries[: len(entries) - keep]:
                removed += _remove(Path(path))
        return removed

    def _prepare(self) -> None:
        if self.entries.is_dir():
            return
        self.entries.mkdir(parents=True, exist_ok=True)
        ignore = self.directory / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# Created by torchlint: the cache is never committed.\n*\n", encoding="utf-8")
        tag = self.directory / "CACHEDIR.TAG"
        if not tag.exists():  # backup tools skip directories tagged so
            tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# torchlint's result cache\n", encoding="utf-8")


_ENTRY_NAME = re.compile("[0-9a-f]{64}")  # a key: sha256, hex
_SIGNATURE_SIZE = hashlib.sha256().digest_size
SECRET_SIZE = 32


def _header(key: str) -> bytes:
    return _MAGIC + key.encode("ascii") + b"\n"


def _signature(secret: bytes, key: str, body: bytes) -> bytes:
    return hmac.new(secret, key.encode("ascii") + b"\n" + body, hashlib.sha256).digest()


def _decode(data: bytes, key: str, secret: bytes) -> FileResult | None:
    header = _header(key)
    if not data.startswith(header):
        return None  # another version's entry, or one cut short while written by hand
    signature, body = data[len(header):len(header) + _SIGNATURE_SIZE], data[len(header) + _SIGNATURE_SIZE:]
    if not hmac.compare_digest(signature, _signature(secret, key, body)):
        return None  # not written by this user's torchlint: never unpickled
    try:
        findings, conditional, summary, in_functions, pending = pickle.loads(body)
    except Exception:  # a corrupt entry is a miss: unpickling garbage can raise anything
        return None
    if not _well_formed(findings, conditional, summary) or not _all_of(in_functions, InStepIfCalled) or not _all_of(pending, Pending):
        return None
    return FileResult(None, findings, conditional=conditional, summary=summary, in_functions=in_functions, pending=pending)


def _all_of(items: object, kind: type) -> bool:
    return isinstance(items, list) and all(isinstance(item, kind) for item in items)


def _well_formed(findings: object, conditional: object, summary: object) -> bool:
    return (
        isinstance(findings, list) and all(isinstance(f, Finding) for f in findings)
        and isinstance(conditional, list)
        and all(isinstance(c, Conditional) and isinstance(c.finding, Finding) for c in conditional)
        and (summary is None or isinstance(summary, FileSummary))
    )


def secret_file() -> Path:
    """Where the user's cache secret lives: ``$XDG_CACHE_HOME/torchlint/key``, else
    ``~/.cache/torchlint/key`` (never in a project, where a clone could bring one)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchlint" / "key"


_secrets: dict[Path, bytes | None] = {}


def user_secret() -> bytes | None:
    """The user's cache secret, made on first use; None when it cannot be read or made,
    or when the file is not the user's own (a link, another owner, readable by others)."""
    path = secret_file()
    if path not in _secrets:
        _secrets[path] = _read_secret(path) or _make_secret(path)
    return _secrets[path]


def _read_secret(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        # A secret others can read or write is no secret (POSIX modes; Windows has none to check).
        if not stat.S_ISREG(info.st_mode) or (os.name == "posix" and (info.st_mode & 0o077 or info.st_uid != os.getuid())):
            return None
        data = os.read(fd, SECRET_SIZE + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) == SECRET_SIZE else None


def _make_secret(path: Path) -> bytes | None:
    """A new secret, written mode 0600 and linked into place (two processes making one at
    once both end up with the one that landed first)."""
    if os.path.lexists(path):
        return None  # there, but not usable (see _read_secret): left for the user to look at
    import tempfile  # once per user: a run that reads the cache never loads it

    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".key-")  # mode 0600
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(SECRET_SIZE))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another process was first: its secret is the one
        except OSError:
            os.replace(temporary, path)  # a file system without hard links
    except OSError:
        return None
    finally:
        _remove(Path(temporary))
    return _read_secret(path)


def _engine_salt() -> str:
    """torchlint's version, Python's, and a fingerprint of the code that makes results
    (torchlint's own modules and libcst's version file), so an edited checkout or an
    upgraded parser never reads results an older engine wrote."""
    package = Path(__file__).resolve().parent.parent
    stamps = []
    for directory, dirnames, filenames in os.walk(package):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                stamps.append(_stamp(os.path.join(directory, name)))
    spec = importlib.util.find_spec("libcst")  # finds the package without importing it
    if spec is not None and spec.origin:
        stamps.append(_stamp(os.path.join(os.path.dirname(spec.origin), "_version.py")))
    fingerprint = hashlib.sha256(repr(stamps).encode()).hexdigest()
    return f"{__version__}|{sys.version}|{fingerprint}"


def _stamp(path: str) -> tuple[str, int, int]:
    try:
        info = os.stat(path)
    except OSError:
        return (path, 0, 0)
    return (path, info.st_mtime_ns, info.st_size)


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _remove(path: Path) -> int:
    try:
        path.unlink()
    except OSError:
        return 0
    return 1


_NOT_IN_KEY = {"root", "source", "extended", "per_file_ignores"}


def keys_of(configs: list[Config]) -> dict[int, Keys]:
    """The cache keys of each distinct config (one object per config file), by its id."""
    keys: dict[int, Keys] = {}
    for config in configs:
        if id(config) not in keys:
            keys[id(config)] = Keys(config)
    return keys


class Keys:
    """What, besides its bytes, each file's result depends on (see cache.FileKey)."""

    def __init__(self, config: Config) -> None:
        known = catalogue.defaults()
        self.codes = selected_codes(config, known)  # raises ConfigError for an unknown code
        self.per_file = PerFileIgnores(config, known)
        # Every setting but where the config lives and the per-file ignores (which enter the
        # key as each file's own ignored codes), so a new setting can never be left out.
        self.options = tuple((f.name, repr(getattr(config, f.name))) for f in fields(config) if f.name not in _NOT_IN_KEY)

    def of(self, file: SourceFile) -> FileKey:
        ignored = self.per_file.ignored_codes(file.path)
        codes = tuple(sorted(self.codes - ignored))
        return FileKey(file.display, os.path.abspath(file.path), codes, tuple(sorted(ignored)), self.options)


@dataclass(frozen=True, slots=True)
class Entry:
    """A file's cache key, and its size and time as they were when its bytes were hashed."""

    key: str
    stamp: tuple[int, int]


def look_up(store: Cache | None, keys: Keys | list[Keys], file: SourceFile, tails: frozenset[str] | None = None) -> tuple[FileResult | None, Entry | None]:
    """The cached result of ``file`` (or None), and the entry its result is to go in;
    with several ``keys``, the first that holds a result wins, and a new result goes
    under the last. ``tails``: the run's project's module tails (``project_index.module_tails``);
    a result whose summary left out the facts of calls an import of one of them makes is a miss."""
    if store is None:
        return None, None
    try:
        info = file.path.stat()
        if not stat.S_ISREG(info.st_mode) or (file.byte_limit is not None and info.st_size > file.byte_limit):
            return None, None  # a FIFO (reading would block), a file too large: TL000 there
        stamp = (info.st_mtime_ns, info.st_size)
        data = file.path.read_bytes()
    except OSError:
        return None, None  # checked as usual (it becomes TL000 there), never cached
    digest = content_digest(data)
    entries = [Entry(store.key(k.of(file), digest), stamp) for k in (keys if isinstance(keys, list) else [keys])]
    for entry in entries:
        hit = store.load(entry.key)
        if hit is not None and (tails is None or hit.summary is None or hit.summary.skipped.isdisjoint(tails)):
            hit.path = file.path
            return hit, entry
    return None, entries[-1]


def _file_stamp(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_mtime_ns, info.st_size


def unchanged(file: SourceFile, entry: Entry) -> bool:
    """Whether the file still is what was hashed: a file edited while it was being
    checked must not have its new result stored under its old bytes."""
    try:
        return _file_stamp(file.path) == entry.stamp
    except OSError:
        return False
