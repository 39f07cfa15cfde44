#!/usr/bin/python3
"""A generated docs page against what its generator prints now: fails with the diff and the
command that rewrites the page.

Usage: check_generated.py PAGE COMMAND [ARGS...]
(COMMAND prints the page on stdout; COMMAND --write PAGE writes it: every generator of docs/reference/.)
"""

import difflib
import subprocess
import sys


def emit(made, argv):
    """What every generator of docs/reference/ does with its page: writes it to PAGE when its
    arguments end with `--write PAGE`, else prints it (what main() below compares)."""
    if len(argv) >= 2 and argv[-2] == "--write":
        with open(argv[-1], "w", encoding="utf-8") as f:
            f.write(made)
    else:
        sys.stdout.write(made)


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
