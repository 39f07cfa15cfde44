#!/usr/bin/python3
"""The README stays a front door: at most 200 lines, and every link in it to a file of the
repository names one that exists (the docs site's own links are checked by mkdocs --strict).

Usage: check_readme.py REPO_ROOT [--self-test]
"""

import os
import re
import sys

MAX_LINES = 200
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def problems(root, text):
    found = []
    lines = text.count("\n")
    if lines > MAX_LINES:
        found.append("README.md has %d lines, more than %d: move the detail to a page of docs/" % (lines, MAX_LINES))
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # A URL.
        if not os.path.exists(os.path.join(root, target)):
            found.append("README.md links to %s, which does not exist" % target)
    return found


def main():
    root = sys.argv[1]
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        text = f.read()
    if "--self-test" in sys.argv:
        if not problems(root, text + "[gone](docs/no-such-page.md)\n"):
            sys.exit("self-test: a link to a missing page passed")
        if not problems(root, text + "\n" * (MAX_LINES + 1)):
            sys.exit("self-test: a README of more than %d lines passed" % MAX_LINES)
    found = problems(root, text)
    for problem in found:
        print(problem)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
