#!/usr/bin/python3
"""The wire fuzzer against a server with authentication on. Writes a tokens file (random tokens,
the file holding only their SHA-256) and runs wire_fuzz.py with the server reading it.

Default: one admin principal; setup and checks use its token and every fuzz call is sent with
none, each of which must be answered UNAUTHENTICATED.

--tenants: an admin (tenant "fuzz") for setup and checks, an operator of tenant lab-a who
registers a private model and runs a job at setup, and an operator of tenant lab-b who sends every
fuzz call. The usual rules hold (plus PERMISSION_DENIED / ROLE_REQUIRED, an operator touching a
public model), and no answer to lab-b may hold lab-a's job id, model uid or weights digest, or the
admin's sentinel job ids.

Arguments other than --tenants go to wire_fuzz.py."""

import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile


def principal(name, tenant, role, token):
    return {"name": name, "tenant": tenant, "roles": [role], "token_sha256": hashlib.sha256(token.encode()).hexdigest()}


def main():
    rest = sys.argv[1:]
    tenants = "--tenants" in rest
    rest = [a for a in rest if a != "--tenants"]
    with tempfile.TemporaryDirectory(prefix="posbias-wire-auth-") as work:
        admin, private, fuzz = (secrets.token_urlsafe(24) for _ in range(3))
        principals = [principal("fuzz-admin", "fuzz", "admin", admin)]
        if tenants:
            principals += [principal("a-operator", "lab-a", "operator", private),
                           principal("b-operator", "lab-b", "operator", fuzz)]
        tokens_file = os.path.join(work, "tokens.json")
        with open(tokens_file, "w") as f:
            json.dump({"principals": principals}, f)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire_fuzz.py")
        # "=" joined: a token that begins with "-" (token_urlsafe draws from [A-Za-z0-9_-]) must not
        # read as an option.
        command = [sys.executable, script, *rest, "--server-arg=--auth-tokens-file=" + tokens_file, "--setup-token=" + admin]
        if tenants:
            command += ["--token=" + fuzz, "--private-token=" + private, "--fuzz-tenant=lab-b", "--allow-role-refusals"]
        else:
            command += ["--expect-only", "UNAUTHENTICATED"]
        sys.exit(subprocess.run(command).returncode)


if __name__ == "__main__":
    main()
