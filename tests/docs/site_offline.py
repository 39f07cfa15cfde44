#!/usr/bin/python3
"""The built docs site loads nothing from the network: no <script src> and no stylesheet or font
<link href> of any page points to http(s) (the site is read offline, in a checkout or a container).
Links a reader follows (<a href>) may point anywhere.

Usage: site_offline.py SITE_DIR
"""

import os
import re
import sys

ASSET = re.compile(r"<(script|link|img)\b[^>]*\b(src|href)=[\"'](https?:)?//[^\"']+", re.IGNORECASE)


def main():
    site = sys.argv[1]
    found, pages = [], 0
    for directory, _, names in os.walk(site):
        for name in names:
            if not name.endswith(".html"):
                continue
            pages += 1
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8", errors="replace") as page:
                for match in ASSET.finditer(page.read()):
                    found.append("%s: %s" % (os.path.relpath(path, site), match.group(0)[:120]))
    for line in found:
        print(line)
    print("site_offline: %d pages, %d network assets" % (pages, len(found)))
    return 1 if found or pages == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
