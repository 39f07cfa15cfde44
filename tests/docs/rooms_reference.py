#!/usr/bin/python3
"""The rooms reference page, made from the rooms themselves: the server's rooms in door order
(server/CMakeLists.txt), each one's purpose (the comment heading its CMakeLists.txt), its headers
with the first sentence of each one's opening comment, and the doors it may open (server/doors.txt).
Never edited by hand: --write makes the page, and the test docs.rooms_reference fails when the
committed page differs from what the rooms say now; a room without its heading comment, or a header
without an opening comment, fails it too.

Usage: rooms_reference.py REPO_ROOT [--write docs/reference/rooms.md]   (prints the page without --write)
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_generated import emit  # noqa: E402

HEADER = """# Rooms of the server

Generated from the rooms themselves by `tests/docs/rooms_reference.py --write` (the test
`docs.rooms_reference` fails when this page differs from them): the rooms in the order
`server/CMakeLists.txt` adds them (a room includes only rooms above it), each one's purpose from the
comment heading its `CMakeLists.txt`, its headers with the first sentence of each one's opening
comment, and the doors `server/doors.txt` lets it open (checked on every build by
`tests/architecture/check_doors.py`). Where the rest of the repository lives:
[architecture](../contributing/architecture.md).
"""


def heading_comment(path, marker):
    """The comment lines a file opens with (marker '#' or '//'), joined; None when it has none."""
    lines = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            stripped = line.strip()
            if not stripped.startswith(marker):
                break
            lines.append(stripped[len(marker):].strip())
    text = " ".join(line for line in lines if line)
    return text or None


def first_sentence(text):
    """Up to the first full stop that ends a sentence (one followed by a space or the end)."""
    match = re.match(r"(.+?\.)(\s|$)", text)
    return match.group(1) if match else text


def rooms(root):
    """(room, short purpose) in door order, from server/CMakeLists.txt's add_subdirectory lines."""
    with open(os.path.join(root, "server", "CMakeLists.txt"), encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"add_subdirectory\((\w+)\)\s*(?:#\s*(.*))?", text)


def doors(root):
    """{rule prefix: (allowed, flags)} of server/doors.txt."""
    rules = {}
    with open(os.path.join(root, "server", "doors.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            line, _, flags = line.partition("|")
            files, _, allowed = line.partition(":")
            rules[files.strip()] = (allowed.split(), flags.split())
    return rules


def page(root):
    out, problems = [HEADER], []
    rules = doors(root)
    for room, short in rooms(root):
        folder = os.path.join(root, "server", room)
        purpose = heading_comment(os.path.join(folder, "CMakeLists.txt"), "#")
        if purpose is None:
            problems.append(f"server/{room}/CMakeLists.txt opens with no comment saying what the room holds")
            purpose = ""
        out.append(f"\n## `server/{room}/`" + (f": {short.strip()}" if short else "") + "\n\n" + purpose + "\n")
        headers = sorted(name for name in os.listdir(folder) if name.endswith(".h"))
        if headers:
            out.append("\n| header | what it holds |\n|---|---|\n")
        for name in headers:
            comment = heading_comment(os.path.join(folder, name), "//")
            if comment is None:
                problems.append(f"server/{room}/{name} opens with no comment saying what it holds")
                comment = ""
            out.append(f"| `{name}` | {first_sentence(comment).replace('|', '/')} |\n")
        own = sorted((prefix, rule) for prefix, rule in rules.items() if prefix.startswith(room + "/"))
        if own:
            out.append("\n| files | may include | |\n|---|---|---|\n")
            for prefix, (allowed, flags) in own:
                shown = " ".join(f"`{door}`" for door in allowed if door != prefix and not door.startswith(room + "/"))
                out.append(f"| `{prefix}` | {shown or 'only its own room'} | {', '.join(flags)} |\n")
    return "".join(out), problems


def main():
    made, problems = page(sys.argv[1])
    if problems:
        sys.exit("\n".join(problems))
    emit(made, sys.argv[1:])


if __name__ == "__main__":
    main()
