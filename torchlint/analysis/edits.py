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
    line_end = last.comma.whitespace_after if isinstance(last.comma, cst.Comma) else None
    if isinstance(line_end, cst.ParenthesizedWhitespace) and line_end.first_line.comment is not None:
        # the last argument's line ends with a comment: it stays with that argument, and
        # the new one gets a line of its own
        args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=line_end.with_changes(last_line=_element_indent(call))))  # type: ignore[union-attr]
        closing = cst.ParenthesizedWhitespace(indent=True, last_line=line_end.last_line)
        args.append(new.with_changes(comma=cst.Comma(whitespace_after=closing)))
        return call.with_changes(args=tuple(args))
    if isinstance(last.comma, cst.Comma):  # trailing comma: keep it after the new argument
        between = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else space
        args[-1] = last.with_changes(comma=between)
        args.append(new.with_changes(comma=last.comma))
    else:
        args[-1] = last.with_changes(comma=space)
        args.append(new)
    return call.with_changes(args=tuple(args))


def _element_indent(call: cst.Call) -> cst.SimpleWhitespace:
    """The indentation of the arguments of a call laid out one per line."""
    first = call.whitespace_before_args
    if isinstance(first, cst.ParenthesizedWhitespace):
        return first.last_line
    for arg in call.args:
        after = arg.comma.whitespace_after if isinstance(arg.comma, cst.Comma) else None
        if isinstance(after, cst.ParenthesizedWhitespace) and after.last_line.value:
            return after.last_line
    return cst.SimpleWhitespace("    ")


def with_first_argument(call: cst.Call, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``value`` inserted as the first positional argument."""
    first = cst.Arg(value=value)
    if call.args:
        after = call.whitespace_before_args
        if isinstance(after, cst.ParenthesizedWhitespace):  # one argument per line: keep the layout
            # (a comment after the opening parenthesis stays there, once)
            first = first.with_changes(comma=cst.Comma(whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])))
        else:
            first = first.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=(first, *call.args))


def comments(node: cst.CSTNode) -> list[str]:
    """Every comment inside ``node``, in source order (libcst keeps them in whitespace)."""
    found: list[str] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Comment):
            found.append(current.value)
        stack.extend(reversed(current.children))
    return found


def with_comments(node: cst.CSTNode, lost: list[str]) -> cst.CSTNode | None:
    """``node`` carrying the ``lost`` comments of the code it replaces, each on a line of its
    own: after a call's last argument, else inside parentheses around the expression;
    None when ``node`` can hold none (a statement)."""
    if not lost:
        return node
    if isinstance(node, cst.Call):
        return _after_last_argument(node, lost)
    if isinstance(node, cst.BaseExpression):
        rpar = list(node.rpar) or [cst.RightParen()]
        lpar = list(node.lpar) or [cst.LeftParen()]
        rpar[-1] = rpar[-1].with_changes(whitespace_before=_comment_lines(lost, rpar[-1].whitespace_before))
        return node.with_changes(lpar=lpar, rpar=rpar)
    return None


def _comment_lines(lost: list[str], before: cst.BaseParenthesizableWhitespace | None = None) -> cst.ParenthesizedWhitespace:
    """Whitespace that ends the line with the first comment and puts each other one on its own line."""
    if isinstance(before, cst.ParenthesizedWhitespace):  # a comment already ends the line: add below it
        rest = lost if before.first_line.comment is not None else lost[1:]
        first = before.first_line if before.first_line.comment is not None else cst.TrailingWhitespace(cst.SimpleWhitespace("  "), cst.Comment(lost[0]))
        extra = [cst.EmptyLine(indent=True, whitespace=before.last_line, comment=cst.Comment(c)) for c in rest]
        return before.with_changes(first_line=first, empty_lines=[*before.empty_lines, *extra])
    first = cst.TrailingWhitespace(cst.SimpleWhitespace("  "), cst.Comment(lost[0]))
    extra = [cst.EmptyLine(indent=True, whitespace=cst.SimpleWhitespace("    "), comment=cst.Comment(c)) for c in lost[1:]]
    return cst.ParenthesizedWhitespace(first_line=first, empty_lines=extra, indent=True, last_line=cst.SimpleWhitespace(""))


def _after_last_argument(call: cst.Call, lost: list[str]) -> cst.Call:
    if not call.args:
        return call.with_changes(whitespace_before_args=_comment_lines(lost, call.whitespace_before_args))
    args = list(call.args)
    last = args[-1]
    before = last.comma.whitespace_after if isinstance(last.comma, cst.Comma) else None
    args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=_comment_lines(lost, before)))
    return call.with_changes(args=tuple(args))
