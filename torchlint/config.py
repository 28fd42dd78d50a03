"""Configuration: ``[tool.torchlint]`` in pyproject.toml, merged with CLI options."""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pathspec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ConfigError(Exception):
    """A configuration or selection problem the user must fix (exit status 2)."""


_CODE = re.compile(r"^TL\d{0,3}$")
_VERSION = re.compile(r"^(\d+)\.(\d+)")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]i?[bB]|[bB])?\s*$")
_UNITS = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2, "gb": 1000**3, "gib": 1024**3}
DEFAULT_MAX_FILE_SIZE = 1_000_000  # libcst needs ~700x a file's size in memory


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
    root: Path = field(default_factory=Path.cwd)  # where relative patterns are anchored
    source: Path | None = None  # the pyproject.toml that was read, if any

    @property
    def target_torch_version(self) -> tuple[int, int]:
        match = _VERSION.match(self.target_torch)
        if not match:
            raise ConfigError(f"target-torch must look like '2.4', got {self.target_torch!r}")
        return int(match.group(1)), int(match.group(2))


_KEYS = {f.name.replace("_", "-"): f.name for f in fields(Config) if f.name not in ("root", "source")}


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
    if name == "target_torch":
        value = str(value)
        if not _VERSION.match(value):
            raise ConfigError(f"`target-torch` must look like '2.4', got {value!r}")
        return value
    return value


def check_pattern(pattern: str, key: str) -> None:
    """ConfigError unless ``pattern`` is a gitignore glob that pathspec (and ``re``) accept."""
    try:
        pathspec.GitIgnoreSpec.from_lines([pattern]).match_file("x")
    except (ValueError, re.error) as error:
        raise ConfigError(f"invalid glob {pattern!r} in `{key}`: {error}") from None


def _as_size(value: Any, key: str) -> int:
    """A size in bytes from an integer or a string such as ``"2MB"`` or ``"500 KiB"``."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(f"`{key}` must be a positive size in bytes or like \"2MB\", got {value!r}")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()])


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
            hint = difflib.get_close_matches(normalised, list(_KEYS), n=1)
            where = f" in {source}" if source else ""
            suggestion = f" (did you mean `{hint[0]}`?)" if hint else ""
            raise ConfigError(f"unknown configuration key `{key}`{where}{suggestion}")
        changes[_KEYS[normalised]] = _coerce(normalised, value)
    return replace(base or Config(), root=root, source=source, **changes)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start`` that has ``[tool.torchlint]``."""
    start = start.resolve()
    directory = start if start.is_dir() else start.parent
    for candidate in (directory, *directory.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and "torchlint" in _tool_table(_read_toml(pyproject), pyproject):
            return pyproject
    return None


def _read_toml(pyproject: Path) -> dict[str, Any]:
    """The parsed file; ConfigError (never a silent skip) when it cannot be read or parsed."""
    try:
        return tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {pyproject}") from None
    except OSError as error:
        raise ConfigError(f"cannot read {pyproject}: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {pyproject}: {error}") from None


def _tool_table(data: dict[str, Any], pyproject: Path) -> dict[str, Any]:
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"`tool` in {pyproject} must be a table, got {type(tool).__name__}")
    return tool


def load_config(start: Path, overrides: dict[str, Any] | None = None, config_file: Path | None = None) -> Config:
    """Read the nearest ``[tool.torchlint]`` (or ``config_file``) and apply ``overrides``.

    ``overrides`` use config keys (``select``, ``tensor-core-multiple``...); values
    that are None are left out, so CLI options that were not given change nothing.
    """
    pyproject = config_file or find_pyproject(start)
    config = Config(root=(start if start.is_dir() else start.parent).resolve())
    if pyproject is not None:
        table = _tool_table(_read_toml(Path(pyproject)), Path(pyproject)).get("torchlint", {})
        if not isinstance(table, dict):
            raise ConfigError(f"`tool.torchlint` in {pyproject} must be a table")
        config = from_table(table, Path(pyproject).resolve().parent, Path(pyproject))
    given = {k: v for k, v in (overrides or {}).items() if v is not None and v != ()}
    if given:
        config = from_table(given, config.root, config.source, base=config)
    return config


def validate_codes(codes: tuple[str, ...], known: set[str], key: str) -> None:
    """Every code must be ``ALL``, a known code or a prefix of one."""
    for code in codes:
        if code == "ALL":
            continue
        if not _CODE.match(code) or not any(k.startswith(code) for k in known):
            hint = difflib.get_close_matches(code, sorted(known), n=1)
            suggestion = f" (did you mean {hint[0]}?)" if hint else ""
            raise ConfigError(f"unknown rule code `{code}` in `{key}`{suggestion}")
