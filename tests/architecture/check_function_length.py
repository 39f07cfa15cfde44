#!/usr/bin/env python3
"""Checks that no function in server/ and client/ is longer than 80 lines.

A function is counted from the first line of its signature to its closing brace, its lambdas and
local classes included. The parser is a brace matcher over the source with comments, strings and
character literals blanked: a body is an opening brace whose head (the text since the previous
`;`, `{` or `}`) has a parameter list and is not a control statement, a lambda, an initializer or a
namespace, class, struct, enum or union. `--self-test` first checks that it finds planted long
functions of each shape and passes short ones. Usage: check_function_length.py SOURCE_DIR [--self-test]
"""
import re
import sys
from pathlib import Path

MAX_LINES = 80
ROOTS = ("server", "client")
CONTROL = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?(?:if|for|while|switch|catch|do|else|try)\b")
SCOPE = re.compile(r"\b(?:namespace|class|struct|enum|union)\b[^()]*$|^\s*extern\s+\"C\"")
LAMBDA = re.compile(r"\]\s*(?:\([^()]*(?:\([^()]*\)[^()]*)*\))?\s*(?:mutable\s*)?(?:->\s*[\w:<>,\s*&]+)?\s*$")


def blank(text):
    """Comments, string and character literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            k = text.find("(", i)
            delim = text[i + 2:k]
            j = text.find(")" + delim + '"', k)
            j = n if j < 0 else j + len(delim) + 2
            out.append('""' + "".join(ch if ch == "\n" else " " for ch in text[i + 2:j]))
            i = j
        elif c == "'" and 0 < i < n - 1 and text[i - 1].isalnum() and text[i + 1].isalnum():
            out.append(" ")  # A digit separator (1'000'000), not a character literal.
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def is_function_head(head):
    head = " ".join(head.split())
    if not head or ")" not in head:
        return False
    if CONTROL.match(head) or SCOPE.search(head) or head.rstrip().endswith("="):
        return False
    if LAMBDA.search(head):
        return False
    # An initializer list of a braced member or a call argument ends with "(" or ",": not a body.
    if re.search(r"[=(,]\s*$", head):
        return False
    # The parameter list closes before any trailing qualifiers or a constructor's initializers.
    tail = head[head.rfind(")") + 1:]
    return re.fullmatch(r"\s*(?:const|override|final|noexcept|mutable|&|&&|\s|->\s*[\w:<>,*&\s]+)*\s*"
                        r"|\s*(?:const\s*)?(?:noexcept\s*)?:\s*.*", tail) is not None or head.endswith(")")


def functions(text):
    """(first line, last line, name) of every outermost function body in `text`."""
    code = blank(text)
    found, stack, head_start = [], [], 0
    in_function = 0
    for i, c in enumerate(code):
        if c in ";{}":
            if c == "{":
                head = code[head_start:i]
                access = re.match(r"\s*(?:public|private|protected)\s*:(?!:)", head)
                if access:  # "public:" ends the previous declaration.
                    head_start += access.end()
                    head = code[head_start:i]
                is_fn = in_function == 0 and is_function_head(head)
                if is_fn:
                    offset = head_start + (len(head) - len(head.lstrip()))
                    name = re.findall(r"([\w:~]+)\s*\(", head)
                    stack.append(("fn", text.count("\n", 0, offset) + 1, name[0] if name else "?"))
                    in_function += 1
                else:
                    stack.append(("block", 0, ""))
            elif c == "}" and stack:
                kind, first, name = stack.pop()
                if kind == "fn":
                    in_function -= 1
                    found.append((first, text.count("\n", 0, i) + 1, name))
            head_start = i + 1
        elif c == "#" and (i == 0 or code[i - 1] == "\n"):
            pass
    return found


def check(files):
    problems = []
    for path, text in sorted(files.items()):
        for first, last, name in functions(text):
            lines = last - first + 1
            if lines > MAX_LINES:
                problems.append(f"{path}:{first}: {name} has {lines} lines (at most {MAX_LINES})")
    return problems


def load(source_dir):
    files = {}
    for root in ROOTS:
        for path in (Path(source_dir) / root).rglob("*"):
            if path.suffix in (".h", ".cc") and path.is_file():
                # Preprocessor lines are not code (a macro's body holds braces of its own).
                text = path.read_text(encoding="utf-8", errors="replace")
                text = re.sub(r"^[ \t]*#.*?(?<!\\)$", lambda m: " " * len(m.group(0)), text, flags=re.M | re.S)
                files[path.relative_to(source_dir).as_posix()] = text
    return files


def self_test():
    body = "\n".join(f"  x += {i};" for i in range(MAX_LINES))
    planted = {
        "free.cc": f"int Long(int x) {{\n{body}\n  return x;\n}}\nint Short(int x) {{ return x; }}\n",
        "method.cc": f"namespace a {{\nclass C {{\n public:\n  void Run() const override {{\n{body}\n  }}\n}};\n}}\n",
        "ctor.cc": f"C::C(int y)\n    : y_(y) {{\n{body}\n}}\n",
        "lambdas.cc": f"void F() {{\n  auto g = [&](int q) {{\n{body}\n  }};\n}}\nstruct S {{ int v = 0; }};\n",
        "short.cc": "void G() {\n  if (true) {\n  }\n  for (;;) {\n  }\n}\n",
    }
    problems = check(planted)
    expected = ["free.cc:1: Long", "method.cc:4: Run", "ctor.cc:1: C::C", "lambdas.cc:1: F"]
    missing = [e for e in expected if not any(p.startswith(e) for p in problems)]
    extra = [p for p in problems if not any(p.startswith(e) for e in expected)]
    if missing or extra:
        print("self-test failed:", *(f"missed {m}" for m in missing), *(f"wrongly flagged {x}" for x in extra),
              sep="\n  ")
        return False
    return True


def main():
    if "--self-test" in sys.argv and not self_test():
        return 1
    files = load(sys.argv[1])
    problems = check(files)
    for problem in problems:
        print(problem)
    count = sum(len(functions(text)) for text in files.values())
    print(f"{len(files)} files, {count} functions: {len(problems)} over {MAX_LINES} lines")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
