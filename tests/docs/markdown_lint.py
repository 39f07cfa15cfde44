#!/usr/bin/python3
"""Markdown that renders as it reads: a list must follow a blank line (or another list item, or a
heading), or Python-Markdown (the docs site's renderer) runs it into the paragraph above as plain
text. Checks README.md and every page under docs/; prints each offending line and exits 1.

Usage: markdown_lint.py REPO_ROOT
"""

import os
import re
import sys

LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d+\.)\s+\S")
FENCE = re.compile(r"^\s*(```|~~~)")


def problems(path):
    found = []
    in_fence = False
    previous = ""
    in_list = False  # Since the last list item, only its indented continuation lines (or blanks).
    with open(path, encoding="utf-8") as page:
        for number, line in enumerate(page, 1):
            line = line.rstrip("\n")
            if FENCE.match(line):
                in_fence = not in_fence
                previous, in_list = line, False
                continue
            if in_fence:
                continue
            item = LIST_ITEM.match(line)
            paragraph = previous.strip() and not previous.startswith((" ", "\t")) and \
                not LIST_ITEM.match(previous) and not previous.lstrip().startswith(("#", "|", "<"))
            if item and paragraph and not in_list:
                found.append("%s:%d: a list right after a paragraph line (add a blank line before it): %s"
                             % (path, number, line.strip()[:80]))
            if item:
                in_list = True
            elif line.strip() and not line.startswith((" ", "\t")) and not previous.strip():
                in_list = False  # A paragraph after a blank line: the list has ended.
            previous = line
    return found


def main():
    root = sys.argv[1]
    pages = [os.path.join(root, "README.md")]
    for directory, _, names in os.walk(os.path.join(root, "docs")):
        pages += [os.path.join(directory, name) for name in sorted(names) if name.endswith(".md")]
    found = [problem for page in sorted(pages) for problem in problems(page)]
    for problem in found:
        print(os.path.relpath(problem, root) if problem.startswith(root) else problem)
    print("markdown_lint: %d pages, %d problems" % (len(pages), len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
