"""The guard a torch.compile recompilation names, and its kind (TLR15). Pure: no torch.

``recompile_reason`` of torch's compilation records is the first failing guard as dynamo
writes it: ``0/0: tensor 'x' size mismatch at index 0. expected 8, actual 12``,
``0/1: scale == 1  # return x * scale  # t.py:6 in f`` followed by the user stack of the
line that read the value, ``___check_type_id(x, ...), type=<class 'int'>`` ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchlint.profiler.usercode import is_user_file

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$', re.M)
_SIZE = re.compile(r"tensor '(?P<name>[^']+)' size mismatch at index (?P<dim>-?\d+)\. expected (?P<a>\S+), actual (?P<b>\S+)")
_TENSOR = re.compile(r"tensor '(?P<name>[^']+)' (?P<what>[\w ]+?) mismatch")
_TYPE = re.compile(r"___check_type_id\((?P<name>[^,]+),.*?type=<class '(?P<type>[^']+)'>")
_OBJ = re.compile(r"___check_obj_id\((?P<name>[^,]+),")
_VALUE = re.compile(r"^(?P<name>[\w\[\]'\".]+)\s*(?P<op>==|!=|<=|>=|<|>)\s*(?P<value>[^\s#]+)")
_LEN = re.compile(r"len\((?P<name>[^)]+)\)")


#: guard kinds, the words a message uses for them, and their hint
KINDS = {
    "shape": ("a tensor's shape changed", "Mark the changing dimension dynamic (torch._dynamo.mark_dynamic(x, dim)) or "
              "compile with dynamic=True; or pad inputs to a few fixed sizes"),
    "tensor": ("a tensor property changed (dtype, device, strides, requires_grad)",
               "Give the compiled function tensors of the same dtype, device, layout and requires_grad on every call"),
    "value": ("a Python value changed (torch.compile specialises on Python numbers it reads)",
              "Pass the changing number as a tensor (torch.tensor(x)) or keep it constant"),
    "type": ("the type of an argument changed", "Pass the same type on every call (an int every time, not an int then a float)"),
    "object": ("a different object was passed (a new module, function or container)",
               "Reuse one object between calls, or compile the object itself"),
    "length": ("the length of a list, tuple or dict changed", "Keep container lengths the same between calls, or pass a tensor"),
    "global": ("global state changed (grad mode, autocast, default dtype, deterministic mode)",
               "Call the compiled function under the same grad mode and autocast state every time"),
    "other": ("a guard failed", "Run with TORCH_LOGS=recompiles to see each guard that fails"),
}


@dataclass
class Guard:
    kind: str
    detail: str  # the guard as torch wrote it, shortened
    name: str | None = None
    values: tuple[str, str] | None = None  # (expected, actual) for a shape
    used_at: tuple[str, int] | None = None  # the user line the guarded value was read at


def guard_of(reason: str) -> Guard:
    """The guard a recompilation reason names, and its kind."""
    first = reason.strip().splitlines()[0] if reason.strip() else ""
    first = re.sub(r"^\s*\d+/\d+:\s*", "", first)
    detail = first.split("  #", 1)[0].strip() or first.strip()
    used = None
    for m in _FRAME.finditer(reason):
        if is_user_file(m.group("file")):
            used = (m.group("file"), int(m.group("line")))
    if m := _SIZE.search(detail):
        return Guard("shape", detail, m.group("name"), (m.group("a"), m.group("b")), used)
    if m := _TENSOR.search(detail):
        kind = "shape" if "rank" in m.group("what") or "dim" in m.group("what") else "tensor"
        return Guard(kind, detail, m.group("name"), None, used)
    if m := _TYPE.search(detail):
        return Guard("type", detail, m.group("name").strip(), None, used)
    if m := _OBJ.search(detail):
        return Guard("object", detail, m.group("name").strip(), None, used)
    if "global_state" in detail.lower() or "GLOBAL_STATE" in detail:
        return Guard("global", detail, None, None, used)
    if m := _LEN.search(detail):
        return Guard("length", detail, m.group("name"), None, used)
    if m := _VALUE.match(detail):
        return Guard("value", detail, m.group("name"), None, used)
    return Guard("other", detail or "unknown", None, None, used)
