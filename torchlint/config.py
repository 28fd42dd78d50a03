"""Configuration: ``[tool.torchlint]`` in pyproject.toml (or a ``torchlint.toml``), found
for each file, merged with CLI options."""

from __future__ import annotations

import math
import os
import re
import stat
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pathspec

# pathspec, tomllib and difflib are imported where they are first needed: a run with no
# patterns, no .gitignore and no config file to read (a cached run, `--version`) pays for none.


class ConfigError(Exception):
    """A configuration or selection problem the user must fix (exit status 2)."""


_CODE = re.compile(r"^TL\d{0,3}$")
_VERSION = re.compile(r"^(\d{1,9})\.(\d{1,9})(?!\d)")  # bounded: int() of 5,000 digits raises
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]i?[bB]|[bB])?\s*$")
_UNITS = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2, "gb": 1000**3, "gib": 1024**3}
DEFAULT_MAX_FILE_SIZE = 1_000_000  # libcst needs ~700x a file's size in memory
_IMPACTS = ("high", "medium", "low")  # findings.IMPACTS, highest first (tests/test_catalogue.py keeps them equal)


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()  # empty: the default rules
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: dict[str, tuple[str, ...]] = field(default_factory=dict)
    exclude: tuple[str, ...] = ()
    extend_exclude: tuple[str, ...] = ()
    respect_gitignore: bool = True
    tensor_core_multiple: int = 8
    min_dimension: int = 32
    target_torch: str = "2.4"
    max_file_size: int = DEFAULT_MAX_FILE_SIZE  # bytes; larger files are reported, not parsed
    min_impact: str = "medium"  # the lowest impact shown: findings.IMPACTS (not imported: see the table in docs/architecture.md)
    root: Path = field(default_factory=Path.cwd)  # where relative patterns are anchored
    source: Path | None = None  # the config file that was read, if any
    extended: tuple[Path, ...] = ()  # the files its `extend` chain read, nearest first
    broken: str | None = None  # why its config file could not be used: its files are not checked

    @property
    def target_torch_version(self) -> tuple[int, int]:
        match = _VERSION.match(self.target_torch)
        if not match:
            raise ConfigError(f"target-torch must look like '2.4', got {self.target_torch!r}")
        return int(match.group(1)), int(match.group(2))


_KEYS = {f.name.replace("_", "-"): f.name for f in fields(Config) if f.name not in ("root", "source", "extended")}
# In one directory, the first of these that exists is its config file (as ruff's ruff.toml
# wins over pyproject.toml); a pyproject.toml counts only with a [tool.torchlint] table.
CONFIG_NAMES = (".torchlint.toml", "torchlint.toml", "pyproject.toml")


def _as_codes(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in re.split(r"[,\s]+", value) if v]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"`{key}` must be a list of rule codes")
    return tuple(v.strip().upper() for v in value)


def _coerce(key: str, value: Any) -> Any:
    name = _KEYS[key]
    if name in ("select", "extend_select", "ignore"):
        return _as_codes(value, key)
    if name in ("exclude", "extend_exclude"):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"`{key}` must be a list of glob patterns")
        for pattern in value:
            check_pattern(pattern, key)
        return tuple(value)
    if name == "per_file_ignores":
        if not isinstance(value, dict):
            raise ConfigError("`per-file-ignores` must be a table of pattern = [codes]")
        for pattern in value:
            check_pattern(pattern, key)
        return {pattern: _as_codes(codes, key) for pattern, codes in value.items()}
    if name == "max_file_size":
        return _as_size(value, key)
    if name in ("tensor_core_multiple", "min_dimension"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"`{key}` must be a positive integer, got {value!r}")
        return value
    if name == "respect_gitignore":
        if not isinstance(value, bool):
            raise ConfigError(f"`{key}` must be true or false")
        return value
    if name == "min_impact":
        if value not in _IMPACTS:
            raise ConfigError(f"`{key}` must be one of {', '.join(_IMPACTS)}, got {value!r}")
        return value
    if name == "target_torch":
        value = str(value)
        if not _VERSION.match(value):
            raise ConfigError(f"`target-torch` must look like '2.4', got {value!r}")
        return value
    return value


def gitignore_spec(lines: list[str] | tuple[str, ...]) -> pathspec.PathSpec:
    """The matcher of gitignore-style ``lines`` (excludes, per-file ignores, a .gitignore)."""
    import pathspec  # here, not at the top: its import costs a run that matches nothing

    return pathspec.GitIgnoreSpec.from_lines(lines)


def check_pattern(pattern: str, key: str) -> None:
    """ConfigError unless ``pattern`` is a gitignore glob that pathspec (and ``re``) accept."""
    try:
        gitignore_spec([pattern]).match_file("x")
    except (ValueError, re.error) as error:
        raise ConfigError(f"invalid glob {pattern!r} in `{key}`: {error}") from None


def _as_size(value: Any, key: str) -> int:
    """A size in bytes from an integer or a string such as ``"2MB"`` or ``"500 KiB"``."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    number = float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()] if match is not None else 0.0
    size = int(number) if math.isfinite(number) else 0  # "1" and 400 zeros is no size either
    if size < 1:  # "0.5B" is no size at all: it would make every file too large
        raise ConfigError(f"`{key}` must be a positive size in bytes or like \"2MB\" (at least 1 byte), got {value!r}")
    return size


def format_size(size: int) -> str:
    """``1000000`` as ``1 MB``, ``1500`` as ``1.5 kB``."""
    for unit, scale in (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"


def from_table(table: dict[str, Any], root: Path, source: Path | None = None, base: Config | None = None) -> Config:
    """Build a Config from a ``[tool.torchlint]``-shaped table; unknown keys are errors."""
    changes: dict[str, Any] = {}
    for key, value in table.items():
        normalised = key.replace("_", "-")
        if normalised not in _KEYS:
            import difflib  # only to suggest a name

            hint = difflib.get_close_matches(normalised, [*_KEYS, "extend"] if source else list(_KEYS), n=1)
            where = f" in {source}" if source else ""
            suggestion = f" (did you mean `{hint[0]}`?)" if hint else ""
            raise ConfigError(f"unknown configuration key `{key}`{where}{suggestion}")
        changes[_KEYS[normalised]] = _coerce(normalised, value)
    return replace(base or Config(), root=root, source=source, **changes)


def find_pyproject(start: Path) -> Path | None:
    """The nearest config file (``torchlint.toml``, or a pyproject.toml with
    ``[tool.torchlint]``) at or above ``start``."""
    start = start.resolve()
    return _nearest_config({}, start if start.is_dir() else start.parent)


def config_file_in(directory: Path) -> Path | None:
    """The config file of ``directory`` itself, if it has one (see ``CONFIG_NAMES``)."""
    for name in CONFIG_NAMES:
        candidate = directory / name
        try:
            if not candidate.is_file():
                continue
        except OSError:  # a directory that can be listed but not entered: nothing to read there
            continue
        if name != "pyproject.toml":
            return candidate
        try:
            if "torchlint" in _tool_table(_read_toml(candidate), candidate):
                return candidate
        except ConfigError:
            return candidate  # unreadable: it may be torchlint's; reading it again says why (Resolver.broken)
    return None


def _nearest_config(memo: dict[Path, Path | None], directory: Path) -> Path | None:
    """The config file at or above ``directory``; ``memo`` remembers every directory asked
    about on the way, so the files of one tree cost one lookup per directory."""
    walked: list[Path] = []
    found: Path | None = None
    candidate = directory
    while True:  # upward, lazily: building every parent of every file up front costs
        if candidate in memo:
            found = memo[candidate]
            break
        walked.append(candidate)
        found = config_file_in(candidate)
        if found is not None or candidate.parent == candidate:
            break
        candidate = candidate.parent
    for candidate in walked:
        memo[candidate] = found
    return found


# A config file is a few hundred bytes; a larger one is a mistake (`extend = "/dev/zero"`).
MAX_CONFIG_BYTES = 1_000_000


def _config_bytes(path: Path) -> bytes:
    """The bytes of a config file; OSError for what is not a regular file (a FIFO would
    block the run, /dev/zero never ends) or is above ``MAX_CONFIG_BYTES``."""
    def check(info: os.stat_result) -> None:
        if not stat.S_ISREG(info.st_mode):
            raise OSError("not a regular file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise OSError(f"{format_size(info.st_size)}, above the {format_size(MAX_CONFIG_BYTES)} a config file may have")

    check(os.stat(path))  # before opening: opening a FIFO waits for its writer
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as stream:
        check(os.fstat(stream.fileno()))  # it may have been swapped meanwhile
        return stream.read(MAX_CONFIG_BYTES + 1)


def _read_toml(pyproject: Path) -> dict[str, Any]:
    """The parsed file; ConfigError (never a silent skip) when it cannot be read or parsed."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        return tomllib.loads(_config_bytes(Path(pyproject)).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {pyproject}") from None
    except OSError as error:
        raise ConfigError(f"cannot read {pyproject}: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {pyproject}: {error}") from None
    except (ValueError, RecursionError, MemoryError) as error:  # a 4,400-digit integer in any tool's table, arrays nested 10,000 deep
        raise ConfigError(f"cannot read {pyproject}: {_one_line(error)}") from None


def _one_line(error: BaseException) -> str:
    """An exception as one short line: its type when its text says nothing."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__


def _tool_table(data: dict[str, Any], pyproject: Path) -> dict[str, Any]:
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"`tool` in {pyproject} must be a table, got {type(tool).__name__}")
    return tool


def _settings_table(path: Path) -> dict[str, Any]:
    """The settings a config file holds: ``[tool.torchlint]`` of a pyproject.toml, the
    whole file otherwise."""
    data = _read_toml(path)
    if path.name != "pyproject.toml":
        return data
    table = _tool_table(data, path).get("torchlint", {})
    if not isinstance(table, dict):
        raise ConfigError(f"`tool.torchlint` in {path} must be a table")
    return table


def read_config_file(path: Path, chain: tuple[Path, ...] = ()) -> Config:
    """The Config a file sets, its ``extend`` chain followed (its own keys win); its
    patterns are anchored at its directory. A cycle of ``extend`` is a ConfigError, and so
    is anything else that goes wrong reading it: never an internal error."""
    try:
        return _read_config_file(Path(os.path.abspath(path)), chain)
    except ConfigError:
        raise
    except Exception as error:  # whatever a value no check foresaw raises, the file is named
        raise ConfigError(f"cannot read {path}: {_one_line(error)}") from None


def _read_config_file(path: Path, chain: tuple[Path, ...]) -> Config:
    table = dict(_settings_table(path))
    extend = table.pop("extend", None)
    base = None
    if extend is not None:
        if not isinstance(extend, str) or not extend:
            raise ConfigError(f"`extend` in {path} must be the path of a config file")
        if "\0" in extend:  # no file name holds one: os.stat would raise ValueError
            raise ConfigError(f"`extend` in {path} holds a NUL character: {extend!r}")
        target = Path(os.path.abspath(path.parent / os.path.expanduser(extend)))
        if target in (*chain, path):
            cycle = " -> ".join(str(p) for p in (*chain, path, target))
            raise ConfigError(f"`extend` makes a cycle: {cycle}")
        base = read_config_file(target, (*chain, path))
    try:
        config = from_table(table, path.resolve().parent, path, base=base)
    except ConfigError as error:  # a bad value names the file it is in
        raise (error if str(path) in str(error) else ConfigError(f"{error} (in {path})")) from None
    return replace(config, extended=(base.source, *base.extended) if base is not None and base.source else ())


def _overridden(config: Config, overrides: dict[str, Any]) -> Config:
    """``config`` with the command line's settings on top; ``extend-per-file-ignores``
    adds to the file's own table (``per-file-ignores`` replaces it)."""
    if not overrides:
        return config
    overrides = dict(overrides)
    extra = overrides.pop("extend-per-file-ignores", None)
    config = from_table(overrides, config.root, config.source, base=config)
    if extra:
        added = from_table({"per-file-ignores": extra}, config.root).per_file_ignores
        merged = dict(config.per_file_ignores)
        for pattern, codes in added.items():
            merged[pattern] = tuple(dict.fromkeys(merged.get(pattern, ()) + codes))
        config = replace(config, per_file_ignores=merged)
    return config


class Resolver:
    """Each file's Config: that of the nearest config file above it (``config_file``: that
    one for every file; ``isolated``: none), with the command line's ``overrides`` on top.
    Lookups are cached per directory, and each config file is read once."""

    def __init__(self, overrides: dict[str, Any] | None = None, config_file: Path | None = None, isolated: bool = False, cwd: Path | None = None) -> None:
        # Options that were not given (None, or an empty repeatable option) change nothing.
        self.overrides = {k: v for k, v in (overrides or {}).items() if v is not None and v != ()}
        self.config_file = config_file
        self.isolated = isolated
        self.cwd = Path(os.path.abspath(cwd or Path.cwd()))  # the root when no file applies
        self._fixed: Config | None = None
        self._nearest: dict[Path, Path | None] = {}
        self._by_name: dict[str, Path | None] = {}  # the same, by the absolute name asked for
        self._configs: dict[Path | None, Config] = {}
        self.broken: dict[Path, str] = {}  # config files that could not be read, and why
        if config_file is not None and not isolated:
            self._config_of(Path(os.path.abspath(config_file)))  # a bad --config fails at once

    @classmethod
    def fixed(cls, config: Config) -> Resolver:
        """A resolver that gives ``config`` to every file."""
        resolver = cls()
        resolver._fixed = config
        return resolver

    def for_path(self, path: Path) -> Config:
        """The Config of a file (from its directory's lookup) or of a directory."""
        absolute = os.path.abspath(path)
        return self.for_directory(absolute if os.path.isdir(absolute) else os.path.dirname(absolute))

    def for_file(self, path: Path | str) -> Config:
        """The Config of a file known not to be a directory (no stat)."""
        return self.for_directory(os.path.dirname(os.path.abspath(path)))

    def for_directory(self, directory: Path | str) -> Config:
        if self._fixed is not None:
            return self._fixed
        return self._config_of(self.source_for(directory))

    def source_for(self, directory: Path | str) -> Path | None:
        """The config file that applies in ``directory`` (None: the defaults)."""
        if self.isolated:
            return None
        if self.config_file is not None:
            return Path(os.path.abspath(self.config_file))
        name = os.path.abspath(directory)
        if name not in self._by_name:
            self._by_name[name] = _nearest_config(self._nearest, Path(name))
        return self._by_name[name]

    def _config_of(self, source: Path | None) -> Config:
        if source not in self._configs:
            try:
                base = Config(root=self.cwd) if source is None else read_config_file(source)
            except ConfigError as error:
                if self.config_file is not None or source is None:
                    raise  # `--config FILE` names the one config of the run: nothing to check without it
                # One project's broken config stops that project, not the others: its files
                # are left out (excluded from every walk) and the run says why, exit 2.
                self.broken[source] = str(error)
                self._configs[source] = Config(root=source.parent, exclude=("*",), source=source, broken=str(error))
                return self._configs[source]
            self._configs[source] = _overridden(base, self.overrides)
        return self._configs[source]


def load_config(start: Path, overrides: dict[str, Any] | None = None, config_file: Path | None = None) -> Config:
    """The Config of ``start`` (a file or directory): its nearest config file (or
    ``config_file``) with ``overrides`` applied; with no config file, rooted at ``start``.

    ``overrides`` use config keys (``select``, ``tensor-core-multiple``...); values
    that are None are left out, so CLI options that were not given change nothing.
    """
    start = Path(os.path.abspath(start))
    directory = start if start.is_dir() else start.parent
    config = Resolver(overrides, config_file, cwd=directory.resolve()).for_directory(directory)
    if config.broken:  # the one config asked for: no other project to go on with
        raise ConfigError(config.broken)
    return config


def validate_codes(codes: tuple[str, ...], known: set[str], key: str) -> None:
    """Every code must be ``ALL``, a known code or a prefix of one."""
    for code in codes:
        if code == "ALL":
            continue
        if not _CODE.match(code) or not any(k.startswith(code) for k in known):
            import difflib  # only to suggest a code

            hint = difflib.get_close_matches(code, sorted(known), n=1)
            suggestion = f" (did you mean {hint[0]}?)" if hint else ""
            raise ConfigError(f"unknown rule code `{code}` in `{key}`{suggestion}")
