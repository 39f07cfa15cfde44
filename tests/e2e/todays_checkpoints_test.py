#!/usr/bin/python3
"""A Hugging Face checkpoint of each 2025-26 family, as a researcher brings one to the service.

    /usr/bin/python3 tests/e2e/todays_checkpoints_test.py --server-binary build/release/server/posbias-server \
        --cli-binary build/release/client/cli/posbias

For each of qwen3, gemma, gemma2, gemma3_text, phi3, olmo2, granite and smollm3 the test writes a
checkpoint folder under the server's --model-root: config.json as the real checkpoints spell it
(keys the reader ignores included; tests/models/families_test.py's builders) and random float32
weights under Hugging Face's names (tests/models/reference_families.py). Then, through the real
server and the `posbias` CLI:

* the folder registers (`models register NAME --checkpoint DIR`) and reports its family;
* an exact float64 job on given token ids measures what the independent PyTorch reference
  computes from the same files (per-position squared Jacobian norms, mean over the samples,
  1e-10 relative);
* `models export` streams back every tensor byte for byte (the same names, shapes and float32
  bytes as the checkpoint; a tied model's output head is the embedding, stored once).
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import families_test as ft  # noqa: E402 (the config.json builders)
import reference_families as rf  # noqa: E402
import reference_models as rm  # noqa: E402 (safetensors reading and writing)
from posbias_server import Cli, ServerProcess, start_watchdog  # noqa: E402

ARGS = None
LENGTH, SAMPLES = 10, 2
TOLERANCE = 1e-10
JOB_TIMEOUT_S = 300
CHECKPOINTS = {
    "qwen3": ft.qwen3(attention_bias=True, num_hidden_layers=3, use_sliding_window=True, sliding_window=4,
                      max_window_layers=1),
    "gemma": ft.gemma(),
    "gemma2": ft.gemma2(attn_logit_softcapping=2.0, final_logit_softcapping=5.0, query_pre_attn_scalar=4),
    "gemma3": ft.gemma3_text(rope_scaling={"factor": 8.0, "rope_type": "linear"}),
    "phi3": ft.phi3_longrope(8),
    "olmo2": ft.olmo2(num_key_value_heads=2),
    "granite": ft.granite(),
    "smollm3": ft.smollm3(no_rope_layers=[1, 0, 1, 0], use_sliding_window=True, sliding_window=4),
}


def token_rows(name, vocab):
    rng = random.Random(name)
    return [[rng.randrange(vocab) for _ in range(LENGTH)] for _ in range(SAMPLES)]


def tensor_bytes(path):
    """name -> (shape, raw bytes) of every tensor of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    base = 8 + length
    return {name: (info["shape"], data[base + info["data_offsets"][0]:base + info["data_offsets"][1]])
            for name, info in header.items() if name != "__metadata__"}


class TodaysCheckpoints(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="posbias-todays-checkpoints-")
        cls.model_root = os.path.join(cls.root, "models")
        os.makedirs(cls.model_root)
        cls.server = ServerProcess(ARGS.server_binary, ["--data-dir", os.path.join(cls.root, "data"),
                                                        "--model-root", cls.model_root, "--cpu-threads", "1"]).start()
        cls.cli = Cli(ARGS.cli_binary, cls.server, timeout=JOB_TIMEOUT_S)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    def write_checkpoint(self, name, config):
        directory = os.path.join(self.model_root, name)
        os.makedirs(directory)
        # float32 values (what the checkpoint holds), kept in float64 for the reference.
        state = {k: v.float().double() for k, v in rf.random_state(config, seed=len(name)).items()}
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(config, f)
        path = os.path.join(directory, "model.safetensors")
        rm.save_safetensors(path, {k: v.float() for k, v in state.items()})
        return state, path

    def test_each_family_registers_measures_as_the_reference_and_exports_back_byte_for_byte(self):
        for name, config in CHECKPOINTS.items():
            with self.subTest(family=config["model_type"]):
                state, path = self.write_checkpoint(name, config)
                model = self.cli.json("models", "register", name, "--checkpoint", name)
                self.assertEqual(model["state"], "ready", model)
                self.assertEqual(model["family"], config["model_type"])

                rows = token_rows(name, config["vocab_size"])
                tokens = os.path.join(self.root, name + ".tokens.json")
                with open(tokens, "w") as f:
                    json.dump(rows, f)
                job = self.cli.json("jobs", "submit", "--model", name, "--length", LENGTH, "--samples", SAMPLES,
                                    "--tokens", tokens, "--method", "exact", "--dtype", "float64", "--wait")
                self.assertEqual(job["state"], "succeeded", job)
                measured = torch.tensor(self.cli.json("jobs", "result", job["id"])["sq_norm_mean"], dtype=torch.float64)
                want = rf.jacobian_sq_norms(state, config, torch.tensor(rows)).mean(0)
                self.assertEqual(tuple(measured.shape), tuple(want.shape))
                difference = (measured - want).abs().max().item() / want.abs().max().item()
                self.assertLessEqual(difference, TOLERANCE, "%s: measured %s, reference %s" % (name, measured, want))

                exported = os.path.join(self.root, name + ".exported.safetensors")
                result = self.cli.run("models", "export", name, exported)
                self.assertEqual(result.returncode, 0, result.stderr)
                written, back = tensor_bytes(path), tensor_bytes(exported)
                tied = config.get("tie_word_embeddings", config["model_type"] in ("gemma", "gemma2", "gemma3_text",
                                                                                  "smollm3"))
                if tied:
                    written.pop("lm_head.weight", None)
                self.assertEqual(sorted(back), sorted(written))
                for tensor, (shape, data) in written.items():
                    self.assertEqual(back[tensor][0], shape, tensor)
                    self.assertEqual(back[tensor][1], data, "%s: the exported bytes differ" % tensor)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--cli-binary", required=True)
    ARGS, rest = parser.parse_known_args()
    torch.set_num_threads(1)
    start_watchdog(600, "todays_checkpoints_test")
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() and program.result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
