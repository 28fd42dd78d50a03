"""Small libcst call edits shared by fixes: add a keyword, put an argument first."""

from __future__ import annotations

import libcst as cst

_NO_SPACE = cst.SimpleWhitespace("")


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """``name=value`` with no spaces around ``=`` (PEP 8 for keywords)."""
    return cst.Arg(keyword=cst.Name(name), value=value, equal=cst.AssignEqual(_NO_SPACE, _NO_SPACE))


def with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``name=value``: the existing keyword's value replaced, else appended."""
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[i] = arg.with_changes(value=value)
            return call.with_changes(args=tuple(args))
    new = keyword_arg(name, value)
    if not args:
        return call.with_changes(args=(new,))
    last = args[-1]
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if isinstance(last.comma, cst.Comma):  # trailing comma: keep it after the new argument
        between = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else space
        args[-1] = last.with_changes(comma=between)
        args.append(new.with_changes(comma=last.comma))
    else:
        args[-1] = last.with_changes(comma=space)
        args.append(new)
    return call.with_changes(args=tuple(args))


def with_first_argument(call: cst.Call, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``value`` inserted as the first positional argument."""
    first = cst.Arg(value=value)
    if call.args:
        after = call.whitespace_before_args
        if isinstance(after, cst.ParenthesizedWhitespace):  # one argument per line: keep the layout
            first = first.with_changes(comma=cst.Comma(whitespace_after=after))
        else:
            first = first.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=(first, *call.args))
