#!/usr/bin/python3
"""A generated docs page against what its generator prints now: fails with the diff and the
command that rewrites the page.

Usage: check_generated.py PAGE COMMAND [ARGS...]   (COMMAND prints the page on stdout)
"""

import difflib
import subprocess
import sys


def main():
    page, command = sys.argv[1], sys.argv[2:]
    made = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout
    with open(page, encoding="utf-8") as f:
        committed = f.read()
    if committed != made:
        sys.stdout.writelines(difflib.unified_diff(committed.splitlines(True), made.splitlines(True), page, "generated"))
        sys.exit("%s differs from what its generator prints now: run %s --write %s" % (page, command[0], page))


if __name__ == "__main__":
    main()
