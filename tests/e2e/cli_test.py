#!/usr/bin/python3
"""Black-box end-to-end tests of the posbias CLI against a real posbias-server.

Usage (Debian's Python only; it needs nothing outside the standard library):

    /usr/bin/python3 tests/e2e/cli_test.py --server-binary build/dev/server/posbias-server \
        --cli-binary build/dev/client/cli/posbias --golden-dir tests/density/golden

Every test starts from servers this script launches on 127.0.0.1 with OS-chosen ports (read back
from the server's log); every server is stopped with SIGTERM and must exit 0, also when a test
fails. Every subprocess runs under a timeout and a watchdog bounds the whole run.
"""

import argparse
import csv
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

ARGS = None  # Parsed command line (set in main()).
MAIN = None  # The shared server (set in setUpModule()).

SUBPROCESS_TIMEOUT_S = 20
WATCHDOG_S = 120
REL_TOL = 1e-12
LOG_ABS_TOL = 1e-10
SMALLEST_NORMAL = 2.2250738585072014e-308

# ---------------------------------------------------------------------------------------------
# Server processes


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from posbias_server import ServerProcess, start_watchdog, metric_samples, sample_value  # noqa: E402


def start_server(test_case_class, extra_args=()):
    """Starts a server for a test class; it is stopped (and must exit 0) when the class finishes."""
    server = ServerProcess(ARGS.server_binary, extra_args).start()

    def stop():
        code = server.stop()
        if code != 0:
            raise AssertionError("server %s exited with %s after SIGTERM; log:\n%s" % (extra_args, code, server.log))

    test_case_class.addClassCleanup(stop)
    return server


def setUpModule():
    global MAIN
    MAIN = ServerProcess(ARGS.server_binary).start()


def tearDownModule():
    code = MAIN.stop()
    if code != 0 or "stopped cleanly" not in MAIN.log:
        raise AssertionError("shared server exited with %s after SIGTERM; log:\n%s" % (code, MAIN.log))


# ---------------------------------------------------------------------------------------------
# Helpers


def run_cli(*args, server=None, env=None, timeout=SUBPROCESS_TIMEOUT_S):
    """Runs the CLI; --server goes first unless server is False. Returns CompletedProcess (text)."""
    command = [ARGS.cli_binary]
    if server is not False:
        command += ["--server", server or MAIN.address]
    command += [str(a) for a in args]
    full_env = dict(os.environ)
    full_env.pop("POSBIAS_SERVER", None)
    if env:
        full_env.update(env)
    return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                          env=full_env)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_golden(name):
    path = os.path.join(ARGS.golden_dir, name)
    with open(path, newline="") as f:
        lines = [line for line in f if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines))


def continuum_rows(h, alpha):
    return [r for r in read_golden("continuum.csv") if int(r["H"]) == h and float(r["alpha"]) == alpha]


def discrete_rows(h, alpha, length):
    rows = [r for r in read_golden("discrete.csv")
            if int(r["H"]) == h and float(r["alpha"]) == alpha and int(r["L"]) == length]
    return sorted(rows, key=lambda r: int(r["j"]))


def scrape_metrics(server):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.metrics_port, timeout=10) as response:
        return response.status, response.headers.get("Content-Type", ""), response.read().decode()


class CliTestCase(unittest.TestCase):
    maxDiff = None

    def assertExit(self, result, code):
        self.assertEqual(result.returncode, code,
                         "exit code %s, expected %s\nstdout:\n%s\nstderr:\n%s"
                         % (result.returncode, code, result.stdout, result.stderr))

    def run_json(self, *args, **kwargs):
        result = run_cli(*args, "--format", "json", **kwargs)
        self.assertExit(result, 0)
        try:
            return json.loads(result.stdout)
        except ValueError as error:
            self.fail("stdout is not one JSON document (%s):\n%s" % (error, result.stdout))

    def assertClose(self, actual, golden_text, what, rel=REL_TOL):
        """actual (a double or None for a non-finite JSON value) against a golden decimal string."""
        expected = float(golden_text)
        if golden_text.strip() in ("-inf", "inf", "nan"):
            self.assertIsNone(actual, "%s: golden %s, CLI printed %r" % (what, golden_text, actual))
            return
        self.assertIsNotNone(actual, "%s: golden %s, CLI printed null" % (what, golden_text))
        if expected == 0.0 or abs(expected) < SMALLEST_NORMAL:
            # Zero, subnormal or below double range: only require agreement at the absolute scale.
            self.assertLessEqual(abs(actual - expected), SMALLEST_NORMAL,
                                 "%s: golden %s, got %r" % (what, golden_text, actual))
            return
        self.assertLessEqual(abs(actual - expected), rel * abs(expected),
                             "%s: golden %s, got %r (relative error %.3g)"
                             % (what, golden_text, actual, abs(actual - expected) / abs(expected)))

    def assertCliError(self, result, code_name, reason, field):
        self.assertExit(result, 1)
        first = result.stderr.strip().splitlines()[0] if result.stderr.strip() else ""
        self.assertTrue(first.startswith("error: %s [%s] " % (code_name, reason)),
                        "stderr %r does not start with 'error: %s [%s] '" % (result.stderr, code_name, reason))
        self.assertIn(field, first, "the message does not name the field %r: %r" % (field, first))
        self.assertEqual(result.stdout, "", "nothing is printed to stdout on an error")


# ---------------------------------------------------------------------------------------------
# Help and version


class HelpAndVersionTest(CliTestCase):
    SUBCOMMAND_OPTIONS = {
        "health": ["--service"],
        "density": ["--depth", "--alpha", "--alphas", "--x", "--grid"],
        "discrete": ["--depth", "--alpha", "--length", "--positions", "--stride", "--profile", "--summaries-only"],
        "summarize": ["--depth", "--alpha", "--length", "--profile", "--input", "--column", "--leading",
                      "--trailing", "--quantiles"],
        "fit": ["--input", "--column", "--quantity", "--depth", "--depth-range", "--models", "--layer-windows"],
    }

    def test_top_level_help_exits_zero_and_lists_global_options_and_subcommands(self):
        result = run_cli("--help", server=False)
        self.assertExit(result, 0)
        for option in ["--server", "--format", "--plot", "--timeout", "--version"]:
            self.assertIn(option, result.stdout)
        for subcommand in self.SUBCOMMAND_OPTIONS:
            self.assertRegex(result.stdout, r"(?m)^\s+%s\s" % subcommand)

    def test_help_of_every_subcommand_exits_zero_and_mentions_its_options(self):
        for subcommand, options in self.SUBCOMMAND_OPTIONS.items():
            with self.subTest(subcommand=subcommand):
                result = run_cli(subcommand, "--help", server=False)
                self.assertExit(result, 0)
                self.assertIn("Usage:", result.stdout)
                self.assertIn(subcommand, result.stdout)
                for option in options:
                    self.assertIn(option, result.stdout)

    def test_version_prints_the_version_which_matches_the_server(self):
        result = run_cli("--version", server=False)
        self.assertExit(result, 0)
        match = re.fullmatch(r"posbias (\d+\.\d+\.\d+\S*)\s*", result.stdout)
        self.assertIsNotNone(match, "unexpected --version output %r" % result.stdout)
        server = subprocess.run([ARGS.server_binary, "--version"], capture_output=True, text=True,
                                timeout=SUBPROCESS_TIMEOUT_S)
        self.assertEqual(server.returncode, 0)
        self.assertEqual(server.stdout.strip(), "posbias-server " + match.group(1))


# ---------------------------------------------------------------------------------------------
# Health and server selection


class HealthTest(CliTestCase):
    def test_health_prints_serving_and_exits_zero(self):
        result = run_cli("health")
        self.assertExit(result, 0)
        # Where the eye lands: no blank first line, no protobuf or JSON quoting.
        self.assertEqual(result.stdout, "service: (overall)\nstatus: SERVING\n")

    def test_health_of_the_density_service_is_serving_in_json(self):
        self.assertEqual(self.run_json("health", "--service", "posbias.v1.DensityService"),
                         {"service": "posbias.v1.DensityService", "status": "SERVING"})

    def test_health_of_an_unknown_service_exits_one_with_not_found(self):
        result = run_cli("health", "--service", "posbias.v1.NoSuchService")
        self.assertExit(result, 1)
        self.assertIn("NOT_FOUND", result.stderr)

    def test_health_of_the_model_and_job_services_is_serving(self):
        for service in ("posbias.v1.ModelService", "posbias.v1.JobService"):
            self.assertEqual(self.run_json("health", "--service", service)["status"], "SERVING")

    def test_server_flag_is_accepted_after_the_subcommand(self):
        result = run_cli("health", "--server", MAIN.address, server=False)
        self.assertExit(result, 0)
        self.assertIn("SERVING", result.stdout)

    def test_posbias_server_environment_variable_is_the_default_server(self):
        result = run_cli("health", server=False, env={"POSBIAS_SERVER": MAIN.address})
        self.assertExit(result, 0)
        self.assertIn("SERVING", result.stdout)

    def test_server_flag_overrides_the_environment_variable(self):
        result = run_cli("--timeout", "5", "health", server=MAIN.address,
                         env={"POSBIAS_SERVER": "127.0.0.1:%d" % free_port()})
        self.assertExit(result, 0)
        self.assertIn("SERVING", result.stdout)

    def test_unreachable_server_exits_one_with_unavailable(self):
        result = run_cli("--timeout", "5", "health", server="127.0.0.1:%d" % free_port())
        self.assertExit(result, 1)
        self.assertTrue(result.stderr.startswith("error: UNAVAILABLE"), result.stderr)
        self.assertIn("hint: no posbias-server answered at 127.0.0.1:", result.stderr)
        self.assertIn("bash scripts/serve.sh", result.stderr)

    def test_unreachable_server_fails_a_density_call_with_unavailable_too(self):
        result = run_cli("--timeout", "5", "density", "--depth", "3", "--x", "0.5",
                         server="127.0.0.1:%d" % free_port())
        self.assertExit(result, 1)
        self.assertTrue(result.stderr.startswith("error: UNAVAILABLE"), result.stderr)


# ---------------------------------------------------------------------------------------------
# density


class FirstSessionOutputTest(CliTestCase):
    """What a first session prints, read as a person reads it."""

    def test_a_continuum_summary_in_table_form_is_lines_of_names_and_values_not_json(self):
        result = run_cli("summarize", "-H", "24", "-a", "0.5")
        self.assertExit(result, 0)
        self.assertFalse(result.stdout.startswith("\n"), result.stdout)
        self.assertNotIn("{", result.stdout)
        self.assertNotIn('"', result.stdout)
        self.assertNotIn("length", result.stdout, "a continuum has no length: nothing shown as 0")
        self.assertIn("middle_mass:", result.stdout)

    def test_models_list_is_aligned_and_an_unbuilt_presets_size_is_unknown_not_zero(self):
        result = run_cli("models", "list")
        self.assertExit(result, 0)
        lines = result.stdout.splitlines()
        second_column = re.match(r"^\S+\s+", lines[0]).end()
        for line in lines[1:]:
            self.assertEqual(re.match(r"^\S+\s+", line).end(), second_column, line)
        cesaro = next(line for line in lines if line.startswith("cesaro "))
        self.assertNotIn(" 0 ", cesaro)

    def test_a_fit_prints_its_answer_before_the_rows_it_was_made_from(self):
        measured = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "user-guide",
                                "measured.csv")
        result = run_cli("fit", "--input", measured, "--depth-range", "1:8")
        self.assertExit(result, 0)
        first = result.stdout.splitlines()[0]
        self.assertTrue(first.startswith("fits:"), result.stdout[:400])
        self.assertIn("  - model coherent, depth ", result.stdout)

    def test_jobs_list_takes_several_states(self):
        result = run_cli("jobs", "list", "--state", "queued", "--state", "running")
        self.assertExit(result, 0)
        self.assertExit(run_cli("jobs", "list", "--state", "queued,succeeded"), 0)
        self.assertExit(run_cli("jobs", "list", "--state", "unspecified"), 2)

    def test_zero_probes_is_refused_not_taken_as_the_default(self):
        result = run_cli("jobs", "submit", "--model", "gpt2-tiny", "-L", "4", "--method", "hutchinson", "--probes", "0")
        self.assertExit(result, 2)
        self.assertIn("--probes", result.stderr)

    def test_waiting_on_a_pipe_writes_one_progress_line_per_step_without_carriage_returns(self):
        submitted = run_cli("jobs", "submit", "--model", "gpt2-tiny", "-L", "8", "-S", "3", "--wait",
                            "--format", "json")
        self.assertExit(submitted, 0)
        self.assertEqual(json.loads(submitted.stdout)["state"], "succeeded", submitted.stdout)
        self.assertNotIn("\r", submitted.stderr)
        lines = [line for line in submitted.stderr.splitlines() if line.startswith("[")]
        self.assertTrue(lines, submitted.stderr)
        self.assertEqual(len(lines), len(set(lines)), "a line repeats:\n" + submitted.stderr)
        self.assertRegex(lines[-1], r"^\[#{30}\] 100\.0 %  succeeded  samples 3/3$")

    def test_a_comparison_reads_against_the_reference_the_user_names(self):
        submitted = run_cli("jobs", "submit", "--model", "gpt2-tiny", "--versus", "init", "--init-seed", "7",
                            "--reference", "init", "-L", "8", "-S", "2", "--wait", "--format", "json")
        self.assertExit(submitted, 0)
        job = json.loads(submitted.stdout)
        self.assertEqual(job["state"], "succeeded", submitted.stdout)
        result = run_cli("jobs", "result", job["id"])
        self.assertExit(result, 0)
        rows = {line.split()[0]: line for line in result.stdout.splitlines()
                if line.startswith(("gpt2-tiny ", "init "))}
        self.assertIn("(reference)", rows["init"])
        self.assertNotIn("(reference)", rows["gpt2-tiny"])
        refused = run_cli("jobs", "submit", "--model", "gpt2-tiny", "--versus", "init", "--reference", "step9",
                          "-L", "8", "-S", "2")
        self.assertExit(refused, 1)
        self.assertIn("spec.jacobian_norm.reference", refused.stderr)
        self.assertIn("gpt2-tiny, init", refused.stderr)

    def test_quota_says_in_words_that_a_principal_has_no_limit_of_its_own(self):
        result = run_cli("jobs", "quota")
        self.assertExit(result, 0)
        self.assertIn("max_queued_jobs: no limit of its own", result.stdout)


class TokensFileTest(CliTestCase):
    def test_a_token_id_of_two_to_the_32_or_more_is_refused_not_wrapped(self):
        path = os.path.join(tempfile.gettempdir(), "posbias-cli-tokens-%d.json" % os.getpid())
        try:
            for big in (2 ** 32, 2 ** 40):
                with open(path, "w") as f:
                    json.dump([[1, 2, big, 3]], f)
                result = run_cli("jobs", "submit", "--model", "gpt2-tiny", "-L", "4", "--tokens", path)
                self.assertNotEqual(result.returncode, 0, result.stdout)
                self.assertIn("sample 1, id 3 is %d" % big, result.stderr)
                self.assertIn("0..4294967295", result.stderr)
        finally:
            if os.path.exists(path):
                os.remove(path)


class DensityTest(CliTestCase):
    COLUMNS = ["x", "density", "log_density", "cdf", "ccdf"]

    def check_against_golden(self, h, alpha, xs):
        rows = {r["x"]: r for r in continuum_rows(h, alpha)}
        self.assertTrue(rows, "no golden rows for H=%s alpha=%s" % (h, alpha))
        out = self.run_json("density", "--depth", h, "--alpha", repr(alpha), "--x", ",".join(xs))
        self.assertEqual(out["x"], [float(x) for x in xs])
        for i, x in enumerate(xs):
            row = rows[x]
            what = "H=%s alpha=%s x=%s" % (h, alpha, x)
            for column in ["density", "cdf", "ccdf"]:
                self.assertClose(out[column][i], row[column], "%s %s" % (what, column))
            if row["log_density"] == "-inf":
                self.assertIsNone(out["log_density"][i])
            else:
                self.assertLessEqual(abs(out["log_density"][i] - float(row["log_density"])), LOG_ABS_TOL, what)
        self.assertClose(out["atom"], rows[xs[0]]["atom"], "H=%s alpha=%s atom" % (h, alpha))
        return out

    def test_json_output_is_one_object_with_arrays_and_the_atom(self):
        out = self.run_json("density", "--depth", "24", "--alpha", "0.5", "--x", "0.1,0.5")
        self.assertIsInstance(out, dict)
        for column in self.COLUMNS:
            self.assertIsInstance(out[column], list, column)
            self.assertEqual(len(out[column]), 2, column)
            self.assertTrue(all(isinstance(v, float) for v in out[column]), column)
        self.assertIsInstance(out["atom"], float)
        self.assertEqual(out["depth"], 24)
        self.assertEqual(out["atom"], 0.5 ** 24)

    def test_h24_alpha_half_matches_the_golden_table_at_x_point_one_and_half(self):
        self.check_against_golden(24, 0.5, ["0.1", "0.5"])

    def test_h12_alpha_point_one_matches_the_golden_table_across_x(self):
        self.check_against_golden(12, 0.1, ["1e-10", "0.001", "0.1", "0.25", "0.5", "0.75", "0.9", "0.999", "1.0"])

    def test_further_golden_rows_match_including_extreme_x(self):
        for h, alpha, xs in [(1, 1.0, ["0.001", "0.5", "1.0"]),
                             (96, 0.01, ["1e-100", "0.5", "0.9999999999999999"]),
                             (1000, 0.9, ["1e-300", "0.25", "1.0"]),
                             (24, 0.5, ["5e-324", "2.2250738585072014e-308", "0.9999999999999999"])]:
            with self.subTest(H=h, alpha=alpha):
                self.check_against_golden(h, alpha, xs)

    def test_cdf_and_ccdf_are_complementary(self):
        out = self.run_json("density", "--depth", "24", "--alpha", "0.5", "--x", "0.1,0.5,0.9")
        for cdf, ccdf in zip(out["cdf"], out["ccdf"]):
            self.assertAlmostEqual(cdf + ccdf, 1.0, delta=1e-15)

    def test_log_grid_gives_fifty_increasing_points_from_start_to_stop(self):
        out = self.run_json("density", "--depth", "12", "--alpha", "0.3", "--grid", "1e-6:1:50")
        self.assertEqual(len(out["x"]), 50)
        for column in self.COLUMNS:
            self.assertEqual(len(out[column]), 50, column)
        self.assertAlmostEqual(out["x"][0], 1e-6, delta=1e-18)
        self.assertEqual(out["x"][-1], 1.0)
        self.assertEqual(out["x"], sorted(out["x"]))
        ratios = [b / a for a, b in zip(out["x"], out["x"][1:])]
        for ratio in ratios:
            self.assertAlmostEqual(ratio, ratios[0], delta=1e-9)

    def test_linear_grid_is_evenly_spaced(self):
        out = self.run_json("density", "--depth", "12", "--alpha", "0.3", "--grid", "0.1:1:10:linear")
        self.assertEqual(len(out["x"]), 10)
        for i, x in enumerate(out["x"]):
            self.assertAlmostEqual(x, 0.1 + 0.1 * i, delta=1e-15)

    def test_csv_format_has_comment_extras_and_the_column_header(self):
        result = run_cli("--format", "csv", "density", "--depth", "24", "--alpha", "0.5", "--x", "0.1,0.5")
        self.assertExit(result, 0)
        lines = result.stdout.splitlines()
        comments = [line for line in lines if line.startswith("#")]
        data = [line for line in lines if not line.startswith("#")]
        self.assertIn("# atom = 5.960464477539063e-08", comments)
        self.assertEqual(data[0], "x,density,log_density,cdf,ccdf")
        self.assertEqual(len(data), 3)
        self.assertEqual(float(data[1].split(",")[0]), 0.1)
        self.assertEqual(len(data[1].split(",")), 5)

    def test_table_format_has_a_header_line_and_the_atom(self):
        result = run_cli("density", "--depth", "24", "--alpha", "0.5", "--x", "0.1,0.5")
        self.assertExit(result, 0)
        lines = result.stdout.splitlines()
        # The answer first (the atom, the depth), then the table's header and rows.
        header = next(i for i, line in enumerate(lines) if line.split() == self.COLUMNS)
        self.assertEqual(float(lines[header + 1].split()[0]), 0.1)
        self.assertLess(lines.index("atom: 5.960464477539063e-08"), header)
        self.assertIn("depth: 24", lines)

    def test_format_flag_is_accepted_after_the_subcommand(self):
        result = run_cli("density", "--depth", "24", "--x", "0.5", "--format", "json")
        self.assertExit(result, 0)
        self.assertEqual(json.loads(result.stdout)["x"], [0.5])


# ---------------------------------------------------------------------------------------------
# discrete


class DiscreteTest(CliTestCase):
    def check_against_golden(self, out, h, alpha, length, positions):
        rows = {int(r["j"]): r for r in discrete_rows(h, alpha, length)}
        self.assertEqual(len(rows), length)
        self.assertEqual(out["position"], positions)
        for i, j in enumerate(positions):
            self.assertClose(out["coherent"][i], rows[j]["coherent"], "H=%s alpha=%s L=%s j=%s coherent" % (h, alpha, length, j))
            self.assertClose(out["incoherent"][i], rows[j]["incoherent"], "H=%s alpha=%s L=%s j=%s incoherent" % (h, alpha, length, j))

    def test_json_output_is_one_object_with_position_coherent_and_incoherent_arrays(self):
        out = self.run_json("discrete", "--depth", "7", "--alpha", "0.25", "--length", "16")
        self.assertIsInstance(out, dict)
        self.assertEqual(out["position"], list(range(1, 17)))
        self.assertEqual(len(out["coherent"]), 16)
        self.assertEqual(len(out["incoherent"]), 16)
        self.assertAlmostEqual(sum(out["coherent"]), 1.0, delta=1e-14)
        self.assertEqual(out["coherent_summary"]["length"], 16)

    def test_h7_alpha_quarter_length_16_matches_the_golden_table(self):
        out = self.run_json("discrete", "--depth", "7", "--alpha", "0.25", "--length", "16")
        self.check_against_golden(out, 7, 0.25, 16, list(range(1, 17)))

    def test_further_golden_profiles_match(self):
        for h, alpha, length in [(1, 1.0, 8), (24, 0.9, 33), (3, 0.5, 5), (2, 0.0, 3)]:
            with self.subTest(H=h, alpha=alpha, L=length):
                out = self.run_json("discrete", "--depth", h, "--alpha", repr(alpha), "--length", length)
                self.check_against_golden(out, h, alpha, length, list(range(1, length + 1)))

    def test_stride_selects_every_fifth_position(self):
        out = self.run_json("discrete", "--depth", "7", "--alpha", "0.25", "--length", "16", "--stride", "1:16:5")
        self.check_against_golden(out, 7, 0.25, 16, [1, 6, 11, 16])

    def test_positions_are_returned_in_request_order(self):
        out = self.run_json("discrete", "--depth", "7", "--alpha", "0.25", "--length", "16", "--positions", "3,1")
        self.check_against_golden(out, 7, 0.25, 16, [3, 1])

    def test_profile_coherent_leaves_the_incoherent_array_empty(self):
        out = self.run_json("discrete", "--depth", "7", "--alpha", "0.25", "--length", "16", "--profile", "coherent")
        self.assertEqual(len(out["coherent"]), 16)
        self.assertEqual(out["incoherent"], [])

    def test_summaries_only_returns_no_positions_but_both_summaries(self):
        full = self.run_json("discrete", "--depth", "7", "--alpha", "0.25", "--length", "16")
        out = self.run_json("discrete", "--depth", "7", "--alpha", "0.25", "--length", "16", "--summaries-only")
        self.assertEqual(out["position"], [])
        self.assertEqual(out["coherent"], [])
        self.assertEqual(out["incoherent"], [])
        for key in ["coherent_summary", "incoherent_summary"]:
            self.assertEqual(out[key], full[key], key)
            self.assertEqual(out[key]["length"], 16)
            self.assertEqual([q["level"] for q in out[key]["quantiles"]], [0.5, 0.9, 0.99])
            mass = out[key]["leading_mass"] + out[key]["middle_mass"] + out[key]["trailing_mass"]
            self.assertAlmostEqual(mass, 1.0, delta=1e-12)

    def test_summaries_only_allows_a_length_beyond_the_returned_positions_limit(self):
        out = self.run_json("discrete", "--depth", "2", "--alpha", "0.5", "--length", "2000000", "--summaries-only",
                            "--profile", "coherent")
        self.assertEqual(out["position"], [])
        self.assertEqual(out["coherent_summary"]["length"], 2000000)

    def test_csv_format_has_the_position_header(self):
        result = run_cli("--format", "csv", "discrete", "--depth", "7", "--alpha", "0.25", "--length", "4")
        self.assertExit(result, 0)
        data = [line for line in result.stdout.splitlines() if not line.startswith("#")]
        self.assertEqual(data[0], "position,coherent,incoherent")
        self.assertEqual([line.split(",")[0] for line in data[1:]], ["1", "2", "3", "4"])


# ---------------------------------------------------------------------------------------------
# summarize and fit


class SummarizeAndFitTest(CliTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="posbias-cli-test-")
        cls.addClassCleanup(cls.tmp.cleanup)
        result = run_cli("--format", "json", "discrete", "--depth", "12", "--alpha", "0.3", "--length", "128",
                         "--profile", "coherent")
        if result.returncode != 0:
            raise AssertionError("cannot generate the measured profile: %s" % result.stderr)
        cls.coherent = json.loads(result.stdout)["coherent"]
        cls.measured = [v * v for v in cls.coherent]
        cls.csv_path = os.path.join(cls.tmp.name, "measured.csv")
        with open(cls.csv_path, "w") as f:
            f.write("position,sq_norm\n")
            for j, value in enumerate(cls.measured, start=1):
                f.write("%d,%r\n" % (j, value))
        cls.json_path = os.path.join(cls.tmp.name, "measured.json")
        with open(cls.json_path, "w") as f:
            json.dump({"values": cls.measured}, f)

    def test_summarize_of_a_discrete_theory_profile_matches_the_discrete_command(self):
        out = self.run_json("summarize", "--depth", "12", "--alpha", "0.3", "--length", "128")
        self.assertEqual(out["length"], 128)
        self.assertAlmostEqual(out["total"], 1.0, delta=1e-14)
        self.assertAlmostEqual(out["first_weight"], self.coherent[0], delta=1e-15)
        self.assertAlmostEqual(out["last_weight"], self.coherent[-1], delta=1e-15)
        self.assertAlmostEqual(out["leading_mass"] + out["middle_mass"] + out["trailing_mass"], 1.0, delta=1e-12)
        self.assertEqual([q["level"] for q in out["quantiles"]], [0.5, 0.9, 0.99])
        positions = [q["position"] for q in out["quantiles"]]
        self.assertEqual(positions, sorted(positions))

    def test_summarize_of_the_continuum_reports_the_atom_as_last_weight(self):
        out = self.run_json("summarize", "--depth", "12", "--alpha", "0.3", "--quantiles", "0.5,0.9")
        self.assertEqual(out["length"], 0)
        self.assertAlmostEqual(out["last_weight"], 0.7 ** 12, delta=1e-15)
        self.assertEqual([q["level"] for q in out["quantiles"]], [0.5, 0.9])
        self.assertTrue(0 < out["quantiles"][0]["x"] < out["quantiles"][1]["x"] <= 1)

    def test_summarize_of_a_measured_csv_file_normalizes_the_profile(self):
        out = self.run_json("summarize", "--input", self.csv_path)
        total = math.fsum(self.measured)
        self.assertEqual(out["length"], 128)
        self.assertAlmostEqual(out["total"], total, delta=1e-14)
        self.assertAlmostEqual(out["first_weight"], self.measured[0] / total, delta=1e-14)
        self.assertAlmostEqual(out["last_weight"], self.measured[-1] / total, delta=1e-14)

    def test_summarize_without_input_or_depth_is_a_usage_error(self):
        self.assertExit(run_cli("summarize"), 2)

    def check_fit(self, out):
        self.assertIsInstance(out["fits"], list)
        by_model = {fit["model"]: fit for fit in out["fits"]}
        self.assertEqual(set(by_model), {"coherent", "incoherent"})
        coherent = by_model["coherent"]
        self.assertEqual(coherent["depth"], 12)
        self.assertLess(abs(coherent["alpha"] - 0.3), 1e-4, coherent)
        self.assertLess(abs(coherent["lambda"] - 3.6), 12e-4, coherent)
        self.assertLess(coherent["metrics"]["rmse_log"], 1e-6)
        self.assertGreater(coherent["metrics"]["spearman"], 0.999)
        self.assertEqual(out["measured_summary"]["length"], 128)
        self.assertEqual(out["position"], list(range(1, 129)))
        self.assertEqual(len(out["coherent"]), 128)

    def test_fit_of_a_measured_csv_profile_recovers_alpha(self):
        self.check_fit(self.run_json("fit", "--input", self.csv_path, "--depth", "12"))

    def test_fit_of_a_measured_json_profile_recovers_alpha(self):
        self.check_fit(self.run_json("fit", "--input", self.json_path, "--depth", "12"))

    def test_fit_of_a_named_csv_column_with_only_the_coherent_model(self):
        out = self.run_json("fit", "--input", self.csv_path, "--column", "sq_norm", "--depth", "12",
                            "--models", "coherent")
        self.assertEqual([fit["model"] for fit in out["fits"]], ["coherent"])
        self.assertLess(abs(out["fits"][0]["alpha"] - 0.3), 1e-4)

    def test_fit_with_a_depth_range_finds_depth_twelve(self):
        out = self.run_json("fit", "--input", self.csv_path, "--depth-range", "8:16", "--models", "coherent")
        fit = out["fits"][0]
        self.assertEqual(fit["depth"], 12)
        self.assertLess(abs(fit["alpha"] - 0.3), 1e-4)
        self.assertLessEqual(fit["lambda_low"], fit["lambda"])
        self.assertLessEqual(fit["lambda"], fit["lambda_high"])

    def test_fit_with_a_pattern_of_layer_windows_recovers_alpha_from_the_layers_product(self):
        # Gemma 2's pattern over 6 layers (a window of 16, then full attention): the profile from
        # `discrete --windows`, fitted with --layer-windows, gives back alpha for the coherent model.
        out = self.run_json("discrete", "--depth", "6", "--alpha", "0.4", "--length", "64", "--windows",
                            "16,0,16,0,16,0", "--profile", "coherent")
        path = os.path.join(self.tmp.name, "pattern.json")
        with open(path, "w") as f:
            json.dump({"values": [v * v for v in out["coherent"]]}, f)
        fit = self.run_json("fit", "--input", path, "--column", "values", "--depth", "6", "--layer-windows", "16,0")
        self.assertEqual([f["model"] for f in fit["fits"]], ["coherent"])
        self.assertLess(abs(fit["fits"][0]["alpha"] - 0.4), 1e-4, fit["fits"][0])
        refused = run_cli("fit", "--input", path, "--column", "values", "--depth", "6", "--layer-windows", "16,0",
                          "--models", "incoherent")
        self.assertExit(refused, 1)
        self.assertIn("models", refused.stderr)

    def test_fit_of_a_missing_file_is_a_usage_error(self):
        result = run_cli("fit", "--input", os.path.join(self.tmp.name, "missing.csv"))
        self.assertExit(result, 2)
        self.assertIn("missing.csv", result.stderr)


# ---------------------------------------------------------------------------------------------
# --plot


class PlotTest(CliTestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="posbias-plot-test-")
        self.addCleanup(self.tmp.cleanup)

    def check_svg(self, path):
        with open(path) as f:
            svg = f.read()
        self.assertIn("<svg", svg)
        self.assertIn("<polyline", svg)
        self.assertTrue(svg.rstrip().endswith("</svg>"))

    def test_density_plot_writes_an_svg_file_with_a_polyline(self):
        path = os.path.join(self.tmp.name, "density.svg")
        result = run_cli("--plot", path, "density", "--depth", "12", "--alpha", "0.3", "--grid", "1e-6:1:50")
        self.assertExit(result, 0)
        self.assertIn("plot written to", result.stderr)
        self.check_svg(path)

    def test_discrete_plot_given_after_the_subcommand_writes_an_svg_file(self):
        path = os.path.join(self.tmp.name, "discrete.svg")
        result = run_cli("discrete", "--depth", "7", "--alpha", "0.25", "--length", "16", "--plot", path)
        self.assertExit(result, 0)
        self.check_svg(path)


# ---------------------------------------------------------------------------------------------
# Bad inputs: server errors (exit 1) and usage errors (exit 2)


class BadInputTest(CliTestCase):
    @classmethod
    def setUpClass(cls):
        cls.limited = start_server(cls, ["--max-discrete-length", "1000"])

    CASES = [
        # (description, args, code, reason, field named in the message)
        ("depth 0", ["density", "--depth", "0", "--x", "0.5"], "INVALID_ARGUMENT", "INVALID_DEPTH", "depth"),
        ("depth 100001", ["density", "--depth", "100001", "--x", "0.5"], "INVALID_ARGUMENT", "INVALID_DEPTH", "depth"),
        ("alpha 1.5", ["density", "--depth", "3", "--alpha", "1.5", "--x", "0.5"], "INVALID_ARGUMENT", "INVALID_ALPHA", "alpha"),
        ("alpha -0.1", ["density", "--depth", "3", "--alpha=-0.1", "--x", "0.5"], "INVALID_ARGUMENT", "INVALID_ALPHA", "alpha"),
        ("alpha nan", ["density", "--depth", "3", "--alpha", "nan", "--x", "0.5"], "INVALID_ARGUMENT", "INVALID_ALPHA", "alpha"),
        ("x 0", ["density", "--depth", "3", "--x", "0"], "INVALID_ARGUMENT", "INVALID_POINT", "x[0]"),
        ("x 1.5", ["density", "--depth", "3", "--x", "0.5,1.5"], "INVALID_ARGUMENT", "INVALID_POINT", "x[1]"),
        ("x nan", ["density", "--depth", "3", "--x", "nan"], "INVALID_ARGUMENT", "INVALID_POINT", "x[0]"),
        ("grid count 0", ["density", "--depth", "3", "--grid", "0.1:1:0"], "INVALID_ARGUMENT", "EMPTY_REQUEST", "grid.count"),
        ("grid start 0", ["density", "--depth", "3", "--grid", "0:1:5"], "INVALID_ARGUMENT", "INVALID_POINT", "grid"),
        ("discrete depth 0", ["discrete", "--depth", "0", "--length", "4"], "INVALID_ARGUMENT", "INVALID_DEPTH", "depth"),
        ("length 0", ["discrete", "--depth", "3", "--length", "0"], "INVALID_ARGUMENT", "INVALID_LENGTH", "length"),
        ("length above the default limit", ["discrete", "--depth", "3", "--length", "20000000"],
         "RESOURCE_EXHAUSTED", "REQUEST_TOO_LARGE", "length"),
        ("position 17 of 16", ["discrete", "--depth", "3", "--length", "16", "--positions", "17"],
         "INVALID_ARGUMENT", "INVALID_POSITION", "position"),
        ("position 0", ["discrete", "--depth", "3", "--length", "16", "--positions", "1,0"],
         "INVALID_ARGUMENT", "INVALID_POSITION", "position"),
        ("stride past L", ["discrete", "--depth", "3", "--length", "16", "--stride", "1:17:1"],
         "INVALID_ARGUMENT", "INVALID_POSITION", "stride"),
        ("summarize depth 100001", ["summarize", "--depth", "100001", "--length", "8"],
         "INVALID_ARGUMENT", "INVALID_DEPTH", "depth"),
    ]

    def test_each_bad_input_exits_one_with_the_code_reason_and_field(self):
        for description, args, code, reason, field in self.CASES:
            with self.subTest(description):
                self.assertCliError(run_cli(*args), code, reason, field)

    def test_length_above_a_configured_server_limit_is_resource_exhausted(self):
        result = run_cli("discrete", "--depth", "3", "--length", "1001", server=self.limited.address)
        self.assertCliError(result, "RESOURCE_EXHAUSTED", "REQUEST_TOO_LARGE", "length")
        self.assertIn("1000", result.stderr)

    def test_length_at_a_configured_server_limit_is_accepted(self):
        result = run_cli("--format", "json", "discrete", "--depth", "3", "--length", "1000", "--positions", "1000",
                         server=self.limited.address)
        self.assertExit(result, 0)
        self.assertEqual(json.loads(result.stdout)["position"], [1000])

    def test_empty_x_list_is_reported_as_an_empty_request(self):
        result = run_cli("density", "--depth", "3", "--x", "")
        if result.returncode == 2:
            return  # Rejecting it locally as a usage error is fine too.
        self.assertCliError(result, "INVALID_ARGUMENT", "EMPTY_REQUEST", "x")

    USAGE_CASES = [
        ("unknown flag", ["density", "--depth", "3", "--x", "0.5", "--bogus"], "--bogus"),
        ("unknown global flag", ["--bogus", "health"], "--bogus"),
        ("missing --depth", ["density", "--x", "0.5"], "--depth"),
        ("missing --length", ["discrete", "--depth", "3"], "--length"),
        ("--format xml", ["--format", "xml", "health"], "xml"),
        ("--format xml after the subcommand", ["health", "--format", "xml"], "xml"),
        ("no subcommand", [], "subcommand"),
        ("unknown subcommand", ["bogus"], ""),
        ("density without --x or --grid", ["density", "--depth", "3"], "--x"),
        ("--x and --grid together", ["density", "--depth", "3", "--x", "0.5", "--grid", "0.1:1:3"], "--grid"),
        ("malformed --grid", ["density", "--depth", "3", "--grid", "0.1:1"], "--grid"),
        ("malformed --stride", ["discrete", "--depth", "3", "--length", "8", "--stride", "1:8"], "--stride"),
        ("non-numeric --depth", ["density", "--depth", "three", "--x", "0.5"], "--depth"),
        ("--profile neither", ["discrete", "--depth", "3", "--length", "8", "--profile", "neither"], "neither"),
        ("--timeout 0", ["--timeout", "0", "health"], "--timeout"),
    ]

    def test_usage_errors_exit_two_without_calling_the_server(self):
        for description, args, mention in self.USAGE_CASES:
            with self.subTest(description):
                result = run_cli(*args, server="127.0.0.1:%d" % free_port())  # Unreachable: must not matter.
                self.assertExit(result, 2)
                self.assertIn(mention, result.stderr)
                self.assertNotIn("UNAVAILABLE", result.stderr)


# ---------------------------------------------------------------------------------------------
# Metrics


class MetricsTest(CliTestCase):
    METHOD = "/posbias.v1.DensityService/EvaluateContinuum"

    def test_metrics_count_ok_and_invalid_argument_calls_and_export_the_standard_families(self):
        _, _, before_text = scrape_metrics(MAIN)
        before = metric_samples(before_text)
        self.assertExit(run_cli("density", "--depth", "24", "--alpha", "0.5", "--x", "0.1,0.5,0.9"), 0)
        self.assertExit(run_cli("density", "--depth", "0", "--x", "0.5"), 1)
        self.assertExit(run_cli("discrete", "--depth", "3", "--length", "8"), 0)
        status, content_type, text = scrape_metrics(MAIN)
        self.assertEqual(status, 200)
        self.assertIn("text/plain", content_type)
        after = metric_samples(text)

        def delta(name, **labels):
            return (sample_value(after, name, **labels) or 0) - (sample_value(before, name, **labels) or 0)

        self.assertIsNotNone(sample_value(after, "posbias_rpc_requests_total", method=self.METHOD, code="OK"), text)
        self.assertIsNotNone(sample_value(after, "posbias_rpc_requests_total", method=self.METHOD,
                                          code="INVALID_ARGUMENT"), text)
        self.assertGreaterEqual(delta("posbias_rpc_requests_total", method=self.METHOD, code="OK"), 1)
        self.assertGreaterEqual(delta("posbias_rpc_requests_total", method=self.METHOD, code="INVALID_ARGUMENT"), 1)
        self.assertGreaterEqual(delta("posbias_points_evaluated_total"), 3 + 8)
        self.assertIsNotNone(sample_value(after, "posbias_rpc_latency_seconds_bucket", method=self.METHOD, le="+Inf"))
        self.assertIsNotNone(sample_value(after, "posbias_rpc_latency_seconds_count", method=self.METHOD))
        self.assertIn("posbias_rpc_latency_seconds_bucket", text)
        self.assertEqual(sample_value(after, "posbias_rpcs_in_flight"), 0)
        self.assertEqual(sample_value(after, "posbias_build_info"), 1)
        self.assertGreater(sample_value(after, "process_memory_bytes", type="resident") or 0, 0)
        for family in ["posbias_rpc_requests_total", "posbias_rpc_latency_seconds_bucket", "posbias_rpcs_in_flight",
                       "posbias_points_evaluated_total", "posbias_build_info", "process_memory_bytes"]:
            self.assertIn(family, text)

    def test_build_info_carries_the_cli_version(self):
        version = run_cli("--version", server=False).stdout.split()[-1]
        samples = metric_samples(scrape_metrics(MAIN)[2])
        self.assertEqual(sample_value(samples, "posbias_build_info", version=version), 1)


# ---------------------------------------------------------------------------------------------
# Shutdown and logging


class ShutdownAndLoggingTest(CliTestCase):
    def test_sigterm_makes_the_server_exit_zero_within_seconds_and_log_stopped_cleanly(self):
        server = ServerProcess(ARGS.server_binary).start()
        try:
            self.assertExit(run_cli("health", server=server.address), 0)
            started = time.monotonic()
            code = server.stop(timeout=5)
            self.assertEqual(code, 0, server.log)
            self.assertLess(time.monotonic() - started, 5)
            self.assertIn("stopped cleanly", server.lines[-1])
        finally:
            server.kill()

    def test_json_log_format_makes_every_stderr_line_a_json_object(self):
        server = ServerProcess(ARGS.server_binary, ["--log-format", "json"]).start()
        try:
            self.assertExit(run_cli("density", "--depth", "3", "--x", "0.5", server=server.address), 0)
            self.assertEqual(server.stop(timeout=5), 0, server.log)
        finally:
            server.kill()
        self.assertGreaterEqual(len(server.lines), 3)
        for line in server.lines:
            try:
                record = json.loads(line)
            except ValueError:
                self.fail("stderr line is not JSON: %r" % line)
            self.assertIsInstance(record, dict)
            for key in ["time", "level", "message"]:
                self.assertIn(key, record, line)
        self.assertEqual(json.loads(server.lines[-1])["message"], "stopped cleanly")

    def test_unknown_log_format_is_rejected_at_startup(self):
        result = subprocess.run([ARGS.server_binary, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                                 "--data-dir", tempfile.mkdtemp(prefix="posbias-e2e-data-"), "--log-format", "xml"], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("xml", result.stderr)


# ---------------------------------------------------------------------------------------------


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--cli-binary", required=True)
    parser.add_argument("--golden-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    for path in [ARGS.server_binary, ARGS.cli_binary]:
        if not os.access(path, os.X_OK):
            parser.error("%s is not an executable file" % path)
    for name in ["continuum.csv", "discrete.csv"]:
        if not os.path.isfile(os.path.join(ARGS.golden_dir, name)):
            parser.error("%s has no %s" % (ARGS.golden_dir, name))
    ARGS.server_binary = os.path.abspath(ARGS.server_binary)
    ARGS.cli_binary = os.path.abspath(ARGS.cli_binary)
    start_watchdog(WATCHDOG_S, "cli_test.py")
    try:
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    finally:
        for server in list(ServerProcess.live):
            server.kill()
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
