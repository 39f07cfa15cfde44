#!/usr/bin/python3
"""docs.first_hour: every command of docs/user-guide/first-hour.md, in order, in one shell, against
a real server started as scripts/serve.sh starts it (its data directory `posbias-data` and model
root `runs/`, both relative to the working directory), so the walkthrough cannot drift from what
posbias does. The working directory is a fresh folder holding what the page's commands read: the
build (as build/release), README.md and a copy of client/python.

Usage: run_first_hour.py --source-dir REPO --build-dir build/release --server-binary .../posbias-server
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from posbias_server import ServerProcess, start_watchdog  # noqa: E402

PAGE = "docs/user-guide/first-hour.md"
WATCHDOG_S = 840
SHELL_TIMEOUT_S = 780


def commands(page_text):
    """The page's ```sh blocks, in order."""
    return re.findall(r"^```sh\n(.*?)^```", page_text, flags=re.M | re.S)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--server-binary", required=True)
    args = parser.parse_args()
    start_watchdog(WATCHDOG_S, "run_first_hour.py")
    with open(os.path.join(args.source_dir, PAGE), encoding="utf-8") as f:
        blocks = commands(f.read())
    if len(blocks) < 6:
        sys.exit("%s has %d shell blocks; expected the whole walkthrough" % (PAGE, len(blocks)))
    with tempfile.TemporaryDirectory(prefix="posbias-first-hour-") as work:
        os.makedirs(os.path.join(work, "build"))
        os.symlink(os.path.abspath(args.build_dir), os.path.join(work, "build", "release"))
        shutil.copy(os.path.join(args.source_dir, "README.md"), work)
        shutil.copytree(os.path.join(args.source_dir, "client", "python"), os.path.join(work, "client", "python"),
                        ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
        os.makedirs(os.path.join(work, "runs"))
        os.chdir(work)  # The server's relative data directory and model root, as serve.sh gives them.
        server = ServerProcess(args.server_binary, ["--data-dir", "posbias-data", "--model-root", "runs",
                                                    "--cpu-threads", "2"]).start()
        script = "set -euo pipefail\nset -x\n" + "\n".join(blocks)
        env = dict(os.environ, POSBIAS_SERVER=server.address)
        try:
            ran = subprocess.run(["bash", "-c", script], cwd=work, env=env, stdin=subprocess.DEVNULL,
                                 capture_output=True, text=True, timeout=SHELL_TIMEOUT_S)
        finally:
            code = server.stop()
        sys.stdout.write(ran.stdout[-20000:])
        sys.stdout.write(ran.stderr[-20000:])
        if ran.returncode != 0:
            sys.exit("the walkthrough stopped with exit code %d (its last command is above)" % ran.returncode)
        if code != 0:
            sys.exit("the server exited with %s; log:\n%s" % (code, server.log))
        made = ["rho.svg", "tiny.svg", "measured.csv", "trained.svg", "trained-comparison.svg", "trained-middle.svg",
                "runs/tiny-llama/step30/model.safetensors"]
        missing = [name for name in made if not os.path.exists(os.path.join(work, name))]
        if missing:
            sys.exit("the walkthrough did not make %s" % missing)
        if "middle share" not in ran.stdout:
            sys.exit("the Python part printed no comparison")
        # What the registration of the trained checkpoint says of it: its trainer's seed (in the
        # init recipe, not a seed of 0) and its head width (width 64 / 4 heads).
        for said in ("trained by posbias-train from seed 3", "head_dim: 16", "seed: -"):
            if said not in ran.stdout:
                sys.exit("the trained model's registration does not say %r" % said)
    print("the walkthrough ran: %d blocks" % len(blocks))


if __name__ == "__main__":
    main()
