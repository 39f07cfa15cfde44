#!/usr/bin/python3
"""The docs' API table and roles table say what the proto's descriptors say.

Usage: check_api_docs.py REPO_ROOT [--self-test] [--write]

Reads the committed Python stubs (client/python/posbias/v1, regenerated from proto/ and checked for
drift by python_package.stubs_match_proto), so every RPC, its service and its (posbias.v1.policy)
role come from the descriptors. The API table (docs/user-guide/api.md) must list each service's RPCs exactly;
the "Roles" table (docs/operations/security.md) must list, in the row of each role, exactly the RPCs
whose least role it is; the Audit item there must name exactly the RPCs whose policy is
`audited: true`. --self-test first checks that docs with one RPC missing or moved fail. --write
rewrites the RPC lists of both tables from the descriptors (what a new RPC needs instead of editing
them).
"""

import os
import re
import sys

ROLES = ["reader", "submitter", "operator", "admin"]


def descriptor_methods(root):
    sys.path.insert(0, os.path.join(root, "client", "python"))
    from posbias.v1 import density_service_pb2, job_service_pb2, model_service_pb2, options_pb2
    methods = {}  # service name -> {method: role}
    audited = []  # In proto order.
    for module in (density_service_pb2, model_service_pb2, job_service_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                policy = method.GetOptions().Extensions[options_pb2.policy]
                role = options_pb2.AccessRole.Name(policy.role).replace("ACCESS_ROLE_", "").lower()
                methods.setdefault(service.name, {})[method.name] = role
                if policy.audited:
                    audited.append(method.name)
    methods[AUDITED] = audited
    return methods


# The key of descriptor_methods' audited list (not a service: no service name has a space).
AUDITED = "audited RPCs"
# The README's Audit item: "(the proto's `audited: true`: A, B, and C, whose ...)".
AUDIT_LIST = re.compile(r"(the proto's `audited: true`: )([A-Z][A-Za-z]+(?:,\s+(?:and\s+)?[A-Z][A-Za-z]+)*)")


def audit_list(readme):
    match = AUDIT_LIST.search(readme)
    return None if match is None else set(re.findall(r"[A-Z][A-Za-z]+", match.group(2)))


def table_rows(text, first_cell_pattern):
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2:
            match = re.fullmatch(first_cell_pattern, cells[0])
            if match:
                rows[match.group(1)] = set(re.findall(r"`([A-Za-z]+)`", cells[1]))
    return rows


def problems(readme, methods):
    found = []
    listed_audit = audit_list(readme)
    if listed_audit is None:
        found.append("no Audit item listing the proto's `audited: true` RPCs")
    elif listed_audit != set(methods[AUDITED]):
        found.append("the Audit item's RPCs: missing %s, extra %s" % (
            sorted(set(methods[AUDITED]) - listed_audit), sorted(listed_audit - set(methods[AUDITED]))))
    methods = {service: rpcs for service, rpcs in methods.items() if service != AUDITED}
    api = table_rows(readme, r"`(\w+Service)`")
    for service, rpcs in methods.items():
        listed = api.get(service)
        if listed is None:
            found.append("the API table has no row for %s" % service)
        elif listed != set(rpcs):
            found.append("the API table's %s row: missing %s, extra %s" % (
                service, sorted(set(rpcs) - listed), sorted(listed - set(rpcs))))
    roles = table_rows(readme, r"`(reader|submitter|operator|admin)`")
    for role in ROLES:
        if role == "admin":
            continue  # "everything, in every tenant"
        expected = {m for rpcs in methods.values() for m, r in rpcs.items() if r == role}
        listed = roles.get(role)
        if listed is None:
            found.append("the roles table has no row for %s" % role)
        elif listed != expected:
            found.append("the roles table's %s row: missing %s, extra %s" % (
                role, sorted(expected - listed), sorted(listed - expected)))
    admin_only = sorted(m for rpcs in methods.values() for m, r in rpcs.items() if r == "admin")
    if admin_only and not set(admin_only) <= roles.get("admin", set()):
        found.append("the roles table's admin row must name the admin-only RPCs %s" % admin_only)
    return found


def rewritten(readme, methods):
    """The README with each table row's RPC list as the descriptors give it (proto order)."""
    def names(rpcs):
        return ", ".join("`%s`" % rpc for rpc in rpcs)

    audited = methods[AUDITED]
    methods = {service: rpcs for service, rpcs in methods.items() if service != AUDITED}
    lists = {service: list(rpcs) for service, rpcs in methods.items()}
    for role in ROLES[:-1]:
        lists[role] = [m for rpcs in methods.values() for m, r in rpcs.items() if r == role]
    out = []
    for line in readme.splitlines(keepends=True):
        cells = line.rstrip("\n").split("|")
        first = re.fullmatch(r" `(\w+Service|reader|submitter|operator)` ", cells[1]) if len(cells) > 3 else None
        if first and first.group(1) in lists:
            cells[2] = re.sub(r"`[A-Za-z]+`(?:, `[A-Za-z]+`)*", lambda _: names(lists[first.group(1)]), cells[2], count=1)
            line = "|".join(cells) + ("\n" if line.endswith("\n") else "")
        out.append(line)
    listed = ", ".join(audited[:-1]) + (", and " if len(audited) > 1 else "") + audited[-1]
    return AUDIT_LIST.sub(lambda m: m.group(1) + listed, "".join(out), count=1)


# The pages the tables and the Audit item are on, read as one text.
DOC_FILES = ["docs/user-guide/api.md", "docs/operations/security.md"]


def main():
    root = sys.argv[1]
    texts = {}
    for name in DOC_FILES:
        with open(os.path.join(root, name), encoding="utf-8") as f:
            texts[name] = f.read()
    methods = descriptor_methods(root)
    if "--write" in sys.argv:
        for name in DOC_FILES:
            texts[name] = rewritten(texts[name], methods)
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(texts[name])
    readme = "\n".join(texts[name] for name in DOC_FILES)
    if "--self-test" in sys.argv:
        broken = readme.replace("`Tokenize`, ", "", 1)
        moved = readme.replace("+ `SubmitJob`, ", "+ ", 1)
        unaudited = readme.replace("`audited: true`: SubmitJob, ", "`audited: true`: ", 1)
        for name, text in (("one RPC dropped", broken), ("one RPC moved out of its role", moved),
                           ("one audited RPC left out of the Audit item", unaudited)):
            if text == readme or not problems(text, methods):
                sys.exit("self-test: docs with %s passed the check" % name)
            if problems(rewritten(text, methods), methods):
                sys.exit("self-test: --write did not repair docs with %s" % name)
    found = problems(readme, methods)
    for problem in found:
        print("docs: " + problem)
    if found:
        sys.exit(1)


if __name__ == "__main__":
    main()
