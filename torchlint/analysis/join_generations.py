"""Which project functions run a whole generation (a decode loop of theirs, or one reached
through the calls the join resolves), and which step-loop calls follow one earlier in the same
iteration: whisper's window loop calls ``decode_with_fallback(segment)`` (``model.decode`` ->
``DecodingTask.run`` -> its token loop), then ``add_word_timestamps(...)``, whose reads run once
per window, after that window's whole decode (``Position.AFTER_DECODE``)."""

from __future__ import annotations

from torchlint.analysis.project import Project
from torchlint.analysis.summary import CallSite

DECODED = "decoded token"


class Generations:
    """The project's generating functions, found on demand and remembered."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._calls: dict[tuple[str, str], list[CallSite]] = {}  # (file, caller) -> every call it makes
        self._in_loop: dict[tuple[str, str], list[CallSite]] = {}  # (file, loop key) -> the calls of its iteration
        self._decoding: set[tuple[str, str]] = set()  # functions whose own loop decodes
        for path, summary in project.files.items():
            for call in summary.calls:
                self._calls.setdefault((path, call.caller), []).append(call)
                if call.within and call.turn >= 0:
                    self._in_loop.setdefault((path, call.within), []).append(call)
                if call.unit == DECODED:  # a call made in a hot decode loop of its function
                    self._decoding.add((path, call.caller))
            for loop in summary.loops:
                if loop.over == DECODED:
                    self._decoding.add((path, loop.key.partition("#")[0]))
        self._known: dict[tuple[str, str], bool] = {}

    def follows(self, path: str, call: CallSite) -> bool:
        """Does a call made before ``call`` in its loop's iteration (a statement before it in the
        loop's body, not in a loop nested there, whose calls run per item of their own) run a
        whole generation?"""
        if call.turn <= 0:
            return False
        return any(0 <= other.turn < call.turn and other.caller == call.caller and self._generates(path, other)
                   for other in self._in_loop.get((path, call.within), ()))

    def _generates(self, path: str, call: CallSite) -> bool:
        return any(self.decodes(callee) for callee in self.project.callees(call.target, path))

    def decodes(self, function: tuple[str, str]) -> bool:
        """Does ``function`` run a decode loop, its own or one of the functions it calls, however deep?"""
        known = self._known.get(function)
        if known is not None:
            return known
        self._known[function] = False  # recursion ends here (a cycle generates nothing by itself)
        found = function in self._decoding or any(
            self.decodes(callee)
            for call in self._calls.get(function, ())
            for callee in self.project.callees(call.target, function[0]) if callee != function)
        self._known[function] = found
        return found
