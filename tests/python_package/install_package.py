#!/usr/bin/python3
"""`pip install ./client/python` works offline in a fresh virtual environment.

Usage: /usr/bin/python3 tests/python_package/install_package.py --package-dir client/python --venv DIR

Creates DIR afresh (python3 -m venv --system-site-packages, so Debian's python3-grpcio,
python3-protobuf and python3-numpy satisfy the dependencies), installs a copy of the package
(staged beside DIR, so the build leaves nothing in the source tree) with
`pip install --no-index --no-build-isolation`, then checks that the installed package, not the
source tree, is what the venv's Python imports, with its stubs, type stubs and py.typed. The
client tests then run with DIR/bin/python.
"""

import argparse
import os
import shutil
import subprocess
import sys

TIMEOUT_S = 120


def run(command, **kwargs):
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, **kwargs)
    if result.returncode != 0:
        sys.exit("%s exited %d\nstdout:\n%s\nstderr:\n%s" % (" ".join(command), result.returncode, result.stdout,
                                                            result.stderr))
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--package-dir", required=True)
    parser.add_argument("--venv", required=True)
    args = parser.parse_args()
    package_dir = os.path.abspath(args.package_dir)
    venv = os.path.abspath(args.venv)
    stage = venv + "-source"
    for path in (venv, stage):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(package_dir, stage, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    python = os.path.join(venv, "bin", "python")
    run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation", stage])
    shutil.rmtree(stage, ignore_errors=True)

    probe = ("import os, posbias, posbias.v1.job_service_pb2 as j; "
             "d = os.path.dirname(posbias.__file__); "
             "print(d); print(posbias.__version__); "
             "print(all(os.path.isfile(os.path.join(d, p)) for p in "
             "['py.typed', 'v1/common_pb2.pyi', 'v1/job_service_pb2_grpc.py'])); print(j.Job.DESCRIPTOR.full_name)")
    location, version, complete, job_name = run([python, "-c", probe], cwd=venv).split()
    if not os.path.realpath(location).startswith(os.path.realpath(venv) + os.sep):
        sys.exit("the venv imports posbias from %s, not from its own site-packages" % location)
    if complete != "True":
        sys.exit("the installed package lacks py.typed or its generated stubs: %s" % location)
    if job_name != "posbias.v1.Job":
        sys.exit("posbias.v1.job_service_pb2 is not the generated module (%s)" % job_name)
    shown = run([python, "-m", "pip", "show", "posbias"])
    if "Version: %s" % version not in shown:
        sys.exit("pip show posbias does not report version %s:\n%s" % (version, shown))
    print("posbias %s installed offline into %s" % (version, location))


if __name__ == "__main__":
    main()
