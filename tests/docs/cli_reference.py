#!/usr/bin/python3
"""The CLI reference page, made from the CLI's own help: every command and subcommand's `--help`,
as `posbias` prints it. Never edited by hand: --write makes the page, and the test docs.cli_reference
fails when the committed page differs from what the CLI prints now.

Usage: cli_reference.py --cli build/release/client/cli/posbias [--write docs/reference/cli.md]   (prints the page without --write)
"""

import argparse
import os
import re
import subprocess
import sys

HEADER = """# CLI reference

Generated from `posbias --help` and each subcommand's `--help` by `tests/docs/cli_reference.py
--write` (the test `docs.cli_reference` fails when this page differs from what the CLI prints).
Global options (`--server`, `--format`, `--timeout`, the security options) go before or after the
subcommand; every option with an environment variable says so.
"""


def help_of(cli, path):
    result = subprocess.run([cli, *path, "--help"], capture_output=True, text=True, timeout=30,
                            env={"PATH": os.environ.get("PATH", ""), "COLUMNS": "100"})
    if result.returncode != 0:
        sys.exit("%s --help exited %d: %s" % (" ".join(["posbias", *path]), result.returncode, result.stderr))
    text = result.stdout
    # The usage line names the binary as it was called: the page names it `posbias`.
    return re.sub(r"^Usage: \S*posbias", "Usage: posbias", text, flags=re.M).rstrip() + "\n"


def subcommands(text):
    names, inside = [], False
    for line in text.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
            continue
        if inside:
            match = re.match(r"^  (\S+)\s", line)
            if match:
                names.append(match.group(1))
            elif line.strip() == "":
                continue
            else:
                break
    return names


def page(cli):
    out = [HEADER]
    queue = [[]]
    while queue:
        path = queue.pop(0)
        text = help_of(cli, path)
        out.append("\n## %s\n\n```text\n%s```\n" % (" ".join(["posbias", *path]), text))
        queue[0:0] = [path + [name] for name in subcommands(text)]
    return "".join(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--write", metavar="PAGE", help="write the page there instead of printing it")
    args = parser.parse_args()
    made = page(args.cli)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            f.write(made)
    else:
        sys.stdout.write(made)


if __name__ == "__main__":
    main()
