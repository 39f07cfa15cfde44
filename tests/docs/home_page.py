#!/usr/bin/python3
"""The docs site's home page, made from the README (one source, so the two cannot drift): the
README's text with its links into docs/ made relative to the site (`docs/x.md` -> `x.md`). Never
edited by hand: --write makes the page, and the test docs.home_page fails when the committed page
differs from what the README says now.

Usage: home_page.py REPO_ROOT [--write docs/index.md]   (prints the page without --write)
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_generated import emit  # noqa: E402

NOTE = "<!-- Made from README.md by tests/docs/home_page.py --write docs/index.md: edit README.md. -->\n\n"


def page(root):
    with open(os.path.join(root, "README.md"), encoding="utf-8") as readme:
        text = readme.read()
    return NOTE + re.sub(r"\]\(docs/", "](", text)


if __name__ == "__main__":
    emit(page(sys.argv[1]), sys.argv)
