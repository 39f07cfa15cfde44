#!/usr/bin/python3
"""The limits reference page, made from the limits table itself (server/limits/limits.h, the
POSBIAS_LIMITS rows): every limit's flag, environment variable, default, the range an operator may
set, and what a client past it receives. Never edited by hand: --write makes the page, and the test
docs.limits_reference fails when the committed page differs from what the table says now.

Usage: limits_reference.py REPO_ROOT [--write docs/reference/limits.md]   (prints the page without --write)
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_generated import emit  # noqa: E402

HEADER = """# Limits reference

Generated from the limits table, `server/limits/limits.h`, by `tests/docs/limits_reference.py
--write` (the test `docs.limits_reference` fails when this page differs from the table). The
server's flags, their defaults and the refusal texts all come from that table; what each limit
means for a shared service is in [Limits](../operations/limits.md).

| limit | flag (environment variable) | default | an operator may set | past it, a client gets | what it bounds |
|---|---|---|---|---|---|
"""
CODES = {"kResourceExhausted": "RESOURCE_EXHAUSTED", "kInvalidArgument": "INVALID_ARGUMENT",
         "kDeadlineExceeded": "DEADLINE_EXCEEDED", "kNotFound": "NOT_FOUND", "kAborted": "ABORTED",
         "kCancelled": "CANCELLED", "kFailedPrecondition": "FAILED_PRECONDITION"}


def rows(header_text):
    body = header_text[header_text.index("#define POSBIAS_LIMITS(X)"):]
    body = body[:body.index("\nenum class Limit")]
    body = re.sub(r"/\*.*?\*/", "", body).replace("\\\n", " ")
    found, i = [], body.index("X(", len("#define POSBIAS_LIMITS(X)"))
    while i >= 0:
        args, current, depth, quoted, j = [], "", 0, False, i + 2
        while True:
            c = body[j]
            if quoted:
                current += c
                if c == '"' and body[j - 1] != "\\":
                    quoted = False
            elif c == '"':
                quoted, current = True, current + c
            elif c == "(":
                depth, current = depth + 1, current + c
            elif c == ")" and depth > 0:
                depth, current = depth - 1, current + c
            elif c == ")":
                args.append(current.strip())
                break
            elif c == "," and depth == 0:
                args.append(current.strip())
                current = ""
            else:
                current += c
            j += 1
        found.append(args)
        i = body.find("X(", j)
    return found


def number(text):
    value = float(text)
    return "{:,}".format(int(value)) if value == int(value) and abs(value) < 1e15 else text


def page(root):
    with open(os.path.join(root, "server/limits/limits.h"), encoding="utf-8") as f:
        table = rows(f.read())
    out = [HEADER]
    for args in table:
        _, name, flag, unit, _, lowest, highest, code, reason, shown, help_text = args
        name, flag, unit, shown, help_text = (a.strip('"') for a in (name, flag, unit, shown, help_text))
        variable = "POSBIAS_" + flag[2:].upper().replace("-", "_") if flag else ""
        where = "`%s` (`%s`)" % (flag, variable) if flag else "fixed"
        settable = "%s..%s %s" % (number(lowest), number(highest), unit) if flag else "—"
        status = CODES.get(code, code)
        reason_name = re.sub(r"(?<!^)(?=[A-Z])", "_", reason[1:]).upper()
        if reason_name not in ("INTERNAL_ERROR", "INVALID_ARGUMENT"):
            status += " / " + reason_name
        out.append("| `%s` | %s | %s | %s | %s | %s |\n" % (name, where, shown, settable, status, help_text))
    return "".join(out)


def main():
    emit(page(sys.argv[1]), sys.argv)


if __name__ == "__main__":
    main()
