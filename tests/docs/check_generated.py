#!/usr/bin/python3
"""A generated docs page against what its generator prints now: fails with the diff and the
command that rewrites the page.

Usage: check_generated.py PAGE COMMAND [ARGS...]
(COMMAND prints the page on stdout; COMMAND --write PAGE writes it: every generator of docs/reference/.)
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
        sys.exit("%s differs from what its generator prints now; rewrite it with:\n  %s --write %s"
                 % (page, " ".join(command), page))


if __name__ == "__main__":
    main()
