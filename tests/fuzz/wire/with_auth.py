#!/usr/bin/python3
"""The wire fuzzer against a server with authentication on: writes a tokens file with one admin
principal (its token random, the file holding only its SHA-256), then runs wire_fuzz.py with the
server reading that file, setup and checks using the admin token and every fuzz call sent with
none, each of which must be answered UNAUTHENTICATED. Arguments after -- go to wire_fuzz.py."""

import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile


def main():
    rest = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="posbias-wire-auth-") as work:
        token = secrets.token_urlsafe(24)
        tokens_file = os.path.join(work, "tokens.json")
        with open(tokens_file, "w") as f:
            json.dump({"principals": [{"name": "fuzz-admin", "tenant": "fuzz", "roles": ["admin"],
                                       "token_sha256": hashlib.sha256(token.encode()).hexdigest()}]}, f)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire_fuzz.py")
        command = [sys.executable, script, *rest, "--server-arg=--auth-tokens-file=" + tokens_file,
                   # "=" joined: a token that begins with "-" (token_urlsafe draws from [A-Za-z0-9_-])
                   # must not read as an option.
                   "--setup-token=" + token, "--expect-only", "UNAUTHENTICATED"]
        sys.exit(subprocess.run(command).returncode)


if __name__ == "__main__":
    main()
