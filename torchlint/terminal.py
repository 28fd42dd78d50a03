"""Text a terminal shows safely: control characters as visible escapes, as ruff and git do.

Checked source, file names, config values and exception messages are the user's bytes
(or an attacker's, in a cloned repository). Written raw, an escape sequence clears the
screen, sets the window title, plants an OSC 8 link or writes the clipboard (OSC 52), and
a bidirectional override reorders what is read (Trojan Source). So every output a
terminal may show goes through one of these:

- ``printable``: C0 controls (but tab, and newline where it is structure), DEL, C1
  controls and the bidi overrides/isolates become ``\\x1b``/``\\u202e``; the text
  reports (full, concise, github, statistics, show-fixes, the profile's text report);
- ``json_safe`` and ``xml_safe``: the machine formats stay valid and exact, with those
  characters escaped in the format's own grammar (``\\u009b``, ``&#x9b;``);
- ``SafeStream``: stdout and stderr of every command (cli/__init__.py installs it), the net for a
  message no renderer escaped: it lets through only torchlint's own colour codes (SGR).
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

# Bidi embeddings/overrides (U+202A-U+202E) and isolates (U+2066-U+2069): Trojan Source.
_BIDI = "\u202a-\u202e\u2066-\u2069"
# What a terminal acts on instead of showing: C0 but tab and newline, DEL, C1, bidi.
_CONTROL = f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]"
_CONTROL_OR_NEWLINE = f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_BIDI}]"
# torchlint's own colours, as click.style writes them: Select Graphic Rendition only.
_SGR = "\x1b\\[[0-9;]*m"

_UNSAFE = re.compile(_CONTROL)
_UNSAFE_LINE = re.compile(_CONTROL_OR_NEWLINE)
_UNSAFE_BUT_COLOUR = re.compile(f"{_SGR}|{_CONTROL}")
# In JSON text these appear only inside strings (json.dumps escapes C0 itself); U+2028 and
# U+2029 end a line for JavaScript and some terminals.
_JSON_UNSAFE = re.compile(f"[\x7f-\x9f{_BIDI}\u2028\u2029]")
# XML 1.0 cannot carry C0 controls (but tab, newline, CR) even as character references.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_XML_UNSAFE = re.compile(f"[\r\x7f-\x9f{_BIDI}]")


def _visible(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _visible_match(match: re.Match[str]) -> str:
    text = match.group()
    return text if len(text) > 1 else _visible(text)  # a colour code (SGR) passes as it is


def printable(text: str, *, one_line: bool = False, keep_colour: bool = False) -> str:
    """``text`` with every control character a visible escape; ``one_line`` escapes
    newlines too (a file name, a message that must stay on its line); ``keep_colour``
    lets SGR colour codes through (only where they are torchlint's own)."""
    pattern = _UNSAFE_LINE if one_line else _UNSAFE_BUT_COLOUR if keep_colour else _UNSAFE
    return pattern.sub(_visible_match, text)


def json_safe(text: str) -> str:
    """JSON text (from ``json.dumps``) with DEL, C1, bidi controls and line separators as
    ``\\uXXXX`` escapes: the same values, and nothing raw a terminal acts on."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def xml_safe(text: str) -> str:
    """Serialised XML with DEL, C1, bidi controls and CR as character references (exact),
    and the C0 controls XML 1.0 cannot hold at all as visible ``\\x1b`` text."""
    text = _XML_INVALID.sub(lambda m: _visible(m.group()), text)
    return _XML_UNSAFE.sub(lambda m: f"&#x{ord(m.group()):x};", text)


class SafeStream(io.TextIOBase):
    """A text stream that writes ``printable(text, keep_colour=True)`` to ``raw``."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self.raw = raw

    def write(self, text: str) -> int:  # type: ignore[override]
        if not isinstance(text, str):  # click probes a stream with b"" to tell text from binary
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.raw.write(printable(text, keep_colour=True))
        return len(text)

    def write_exact(self, text: str) -> None:
        """Text that must stay byte for byte (a diff meant for `patch`): exact into a pipe
        or a file, escaped on a terminal, where no one can apply it anyway."""
        self.raw.write(text if not self.isatty() else printable(text))

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.raw, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.raw, "errors", None)


def raw(stream: Any) -> Any:
    """The stream under a SafeStream (for what writes its own control codes: the progress
    bar, the screen clear of ``--watch``, the Language Server's protocol, binary output)."""
    return stream.raw if isinstance(stream, SafeStream) else stream


def write_exact(text: str) -> None:
    """``text`` to stdout as it is where it is not a terminal (see SafeStream.write_exact)."""
    stream = sys.stdout
    if isinstance(stream, SafeStream):
        stream.write_exact(text)
    else:
        stream.write(text)
    stream.flush()


def clear_screen() -> None:
    """Clear the terminal (the one control sequence torchlint writes besides colours)."""
    stream = raw(sys.stdout)
    stream.write("\x1b[2J\x1b[1;1H")
    stream.flush()


@contextmanager
def safe_streams() -> Iterator[None]:
    """stdout and stderr as SafeStreams while the block runs."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if s is None or isinstance(s, SafeStream) else SafeStream(s) for s in saved)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


@contextmanager
def raw_streams() -> Iterator[None]:
    """stdout and stderr unwrapped while the block runs (a protocol on stdio)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = raw(saved[0]), raw(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
