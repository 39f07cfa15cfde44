#!/usr/bin/env python3
"""Checks every `#include "server/..."` in server/ against the doors table (server/doors.txt).

Fails, naming the file, line and rule, when a file includes a header its room may not, when a file
matches no rule, when a torch-free file reaches (through server/ includes, transitively) a
torch, ATen or c10 header, or when a grpc-free file reaches a gRPC header (grpc/, grpcpp/, a
*.grpc.pb.h). `--self-test` first checks that the checker catches a planted mistake.
Usage: check_doors.py SOURCE_DIR [--self-test]
"""
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)
TORCH = re.compile(r"^(torch|ATen|c10)/")
GRPC = re.compile(r"^(grpc|grpcpp)/|\.grpc\.pb\.h$")
FLAGS = {"torch-free": TORCH, "grpc-free": GRPC}


def read_rules(table_text):
    rules = []
    for number, line in enumerate(table_text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        line, _, flags = line.partition("|")
        flags = set(flags.split())
        unknown = flags - set(FLAGS)
        if unknown:
            raise SystemExit(f"doors.txt line {number}: unknown flag(s) {' '.join(sorted(unknown))}")
        files, _, allowed = line.partition(":")
        allowed = [] if allowed.strip() == "-" else allowed.split()
        rules.append((files.strip(), allowed, flags, number))
    return rules


def rule_for(path, rules):
    matches = [rule for rule in rules if path.startswith(rule[0])]
    return max(matches, key=lambda rule: len(rule[0])) if matches else None


def includes(text):
    """(line number, kind, target) of each include: kind '"' or '<'."""
    found = []
    for match in INCLUDE.finditer(text):
        found.append((text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2)))
    return found


def check(files, rules):
    """files: {path under server/: text}. Returns a list of problems."""
    problems = []
    graph = {}
    for path, text in sorted(files.items()):
        rule = rule_for(path, rules)
        if rule is None:
            problems.append(f"server/{path}: no rule in server/doors.txt covers this file")
            continue
        graph[path] = includes(text)
        for line, kind, target in graph[path]:
            if kind != '"' or not target.startswith("server/"):
                continue
            inner = target.removeprefix("server/")
            if not any(inner.startswith(door) for door in rule[1]):
                problems.append(f"server/{path}:{line}: includes {target}, not a door of '{rule[0]}' "
                                f"(doors.txt line {rule[3]} allows: {' '.join(rule[1]) or 'none'})")
    # Transitive freedom from torch and from gRPC.
    for flag, pattern in FLAGS.items():
        reaches = {}

        def forbidden_path(path, seen):
            if path in reaches:
                return reaches[path]
            if path in seen or path not in graph:
                return None
            seen.add(path)
            result = None
            for _, kind, target in graph[path]:
                if pattern.search(target) and (kind == "<" or not target.startswith("server/")):
                    result = [f"<{target}>" if kind == "<" else target]
                    break
                if kind == '"' and target.startswith("server/"):
                    below = forbidden_path(target.removeprefix("server/"), seen)
                    if below is not None:
                        result = [target] + below
                        break
            reaches[path] = result
            return result

        what = flag.removesuffix("-free")
        for path in sorted(graph):
            rule = rule_for(path, rules)
            if flag in rule[2]:
                chain = forbidden_path(path, set())
                if chain is not None:
                    problems.append(f"server/{path}: {flag} by doors.txt line {rule[3]}, "
                                    f"but reaches {what}: {' -> '.join(chain)}")
    return problems


def load(source_dir):
    server = Path(source_dir) / "server"
    files = {}
    for path in server.rglob("*"):
        if path.suffix in (".h", ".cc") and path.is_file():
            files[path.relative_to(server).as_posix()] = path.read_text(encoding="utf-8")
    return files, read_rules((server / "doors.txt").read_text(encoding="utf-8"))


def self_test(files, rules):
    """The checker must catch a wrong arrow, a torch leak and an unruled file."""
    planted = dict(files)
    planted["density/planted.cc"] = '#include "server/app/replica.h"\n'
    planted["jobs/planted.h"] = '#include "server/models/model.h"\n'
    planted["newroom/planted.cc"] = "int x;\n"
    problems = check(planted, rules)
    expected = ["density/planted.cc:1: includes server/app/replica.h",
                "jobs/planted.h: torch-free", "newroom/planted.cc: no rule"]
    missing = [e for e in expected if not any(e in p for p in problems)]
    if missing:
        print("self-test failed: the checker missed:", *missing, sep="\n  ")
        return False
    return True


def main():
    files, rules = load(sys.argv[1])
    if "--self-test" in sys.argv and not self_test(files, rules):
        return 1
    problems = check(files, rules)
    for problem in problems:
        print(problem)
    print(f"{len(files)} files, {len(rules)} rules: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
