#!/usr/bin/python3
"""posbias' Llama, Mistral and GPT-NeoX families against an independent PyTorch implementation of
Hugging Face's modeling code (tests/models/reference_families.py), in float64.

    /usr/bin/python3 tests/models/families_test.py --dump-binary build/release/tests/model_forward_dump

Two routes per case:
* hand-written checkpoints: the test writes config.json and random weights under Hugging Face
  names (random biases and norm weights; one case sharded with model.safetensors.index.json, one
  with the rotary buffers older transformers wrote), model_forward_dump loads the directory
  (--checkpoint) and measures; every option is one case (grouped-query attention, head_dim,
  attention and MLP biases, rope_scaling linear and llama3, tied and untied, a sliding window
  shorter than L, parallel and sequential residual, partial and full rotary, the ablations);
* exported checkpoints: model_forward_dump builds a preset at seeded initialization, exports it,
  and the reference reads the export.
Both compare the final hidden states and the exact per-position Jacobian norms
||d hidden[L] / d e_j||_F^2 (the reference: one autograd call per output coordinate) at most 1e-6
relative (the largest difference over the largest value, and per position for the norms).
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_families as rf  # noqa: E402
import reference_models as rm  # noqa: E402 (safetensors reading and writing)

torch.set_num_threads(1)
TOLERANCE = 1e-6
BATCH, LENGTH = 2, 12
DUMP_BINARY = None


def llama(**extra):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 32,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "vocab_size": 64,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
              "tie_word_embeddings": False}
    config.update(extra)
    return config


def mistral(**extra):
    config = llama(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=4)
    config.update(extra)
    return config


def neox(**extra):
    config = {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "num_hidden_layers": 2,
              "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 64,
              "max_position_embeddings": 64, "layer_norm_eps": 1e-5, "rotary_emb_base": 10000.0,
              "rotary_pct": 0.25, "use_parallel_residual": True, "hidden_act": "gelu",
              "tie_word_embeddings": False}
    config.update(extra)
    return config


# name -> (config, ablation flags, how the checkpoint is written)
CASES = {
    "llama_gqa": (llama(), {}, "single"),
    "llama_one_kv_head": (llama(num_key_value_heads=1), {}, "single"),
    "llama_head_dim": (llama(head_dim=16), {}, "single"),  # 4 heads x 16 != 32.
    "llama_biases": (llama(attention_bias=True, mlp_bias=True), {}, "sharded"),
    "llama_rope_linear": (llama(rope_scaling={"rope_type": "linear", "factor": 4.0}), {}, "single"),
    # original 16 positions: the 4 rotary frequencies fall below, inside and above the ramp.
    "llama_rope_llama3": (llama(rope_theta=500000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16}), {}, "single"),
    "llama_tied": (llama(tie_word_embeddings=True), {}, "single"),
    "llama_no_position_encoding": (llama(), {"no_position_encoding": True}, "single"),
    "llama_uniform_attention": (llama(), {"uniform_attention": True}, "single"),
    "mistral_window_shorter_than_l": (mistral(), {}, "single"),
    "mistral_window_uniform": (mistral(), {"uniform_attention": True}, "single"),
    "mistral_no_window": (mistral(sliding_window=None), {}, "single"),
    "neox_parallel": (neox(), {}, "buffers"),
    "neox_sequential": (neox(use_parallel_residual=False), {}, "single"),
    "neox_full_rotary": (neox(rotary_pct=1.0), {}, "sharded"),
    "neox_no_mlp": (neox(), {"no_mlp": True}, "single"),
}
EXPORTED = {"llama-tiny": {}, "mistral-tiny": {}, "pythia-tiny": {}}
FLAGS = {"no_position_encoding": "--no-position-encoding", "uniform_attention": "--uniform-attention",
         "no_mlp": "--no-mlp"}


def tokens_for(name, vocab):
    rng = random.Random(name)
    return [[rng.randrange(vocab) for _ in range(LENGTH)] for _ in range(BATCH)]


def relative(got, want):
    scale = want.abs().max().item()
    return (got.double() - want).abs().max().item() / (scale if scale > 0 else 1.0)


def write_checkpoint(directory, config, state, layout):
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    if layout != "sharded":
        rm.save_safetensors(os.path.join(directory, "model.safetensors"), state)
        return
    names = sorted(state)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for file, part in halves.items():
        rm.save_safetensors(os.path.join(directory, file), {n: state[n] for n in part})
        weight_map.update({n: file for n in part})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def run_dump(args):
    proc = subprocess.run([DUMP_BINARY] + args, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"model_forward_dump {' '.join(args)} exited {proc.returncode}: {proc.stderr}")


class Families(unittest.TestCase):
    def compare(self, name, config, state, flags, out_path):
        out, _ = rm.load_safetensors(out_path)
        ids = torch.tensor(tokens_for(name, config["vocab_size"]), dtype=torch.int64)
        state = {k: v.to(torch.float64) for k, v in state.items()}
        embeds = torch.nn.functional.embedding(ids, rf.embedding_matrix(state, config))
        hidden = rf.forward(state, config, embeds, **flags)
        self.assertEqual(out["hidden"].dtype, torch.float64)
        self.assertLessEqual(relative(out["hidden"], hidden), TOLERANCE, "hidden states")
        want = rf.jacobian_sq_norms(state, config, ids, **flags)
        self.assertLessEqual(relative(out["jacobian_sq_norms"], want), TOLERANCE, "Jacobian norms")
        # Per position too; where a window leaves a position no influence at all (want = 0), the
        # measured norm must be 0 up to rounding of the largest.
        reached = want > 0
        per_position = ((out["jacobian_sq_norms"] - want).abs()[reached] / want[reached]).max().item()
        self.assertLessEqual(per_position, TOLERANCE, "Jacobian norms per position")
        self.assertLessEqual(out["jacobian_sq_norms"][~reached].abs().max().item() if (~reached).any() else 0.0,
                             1e-12 * want.max().item(), "norms where no influence reaches")
        return hidden

    def test_hand_written_checkpoints_match_the_reference(self):
        for name, (config, flags, layout) in CASES.items():
            with self.subTest(case=name), tempfile.TemporaryDirectory(prefix=f"family-{name}-") as directory:
                state = rf.random_state(config, seed=len(name))
                write_checkpoint(directory, config, state, layout)
                out_path = os.path.join(directory, "out.safetensors")
                tokens = ";".join(",".join(map(str, row)) for row in tokens_for(name, config["vocab_size"]))
                run_dump(["--checkpoint", directory, "--float64", "--tokens", tokens, "--out", out_path]
                         + [FLAGS[k] for k, v in flags.items() if v])
                hidden = self.compare(name, config, {k: v for k, v in state.items() if "inv_freq" not in k},
                                      flags, out_path)
                if flags:  # The ablation must change the model, or the case tests nothing.
                    plain = rf.forward({k: v for k, v in state.items() if "inv_freq" not in k}, config,
                                       torch.nn.functional.embedding(
                                           torch.tensor(tokens_for(name, config["vocab_size"])),
                                           rf.embedding_matrix(state, config)))
                    self.assertGreater(relative(hidden, plain), 1e-3)

    def test_the_window_changes_the_model(self):
        # The window of 4 < L = 12 must matter, else the Mistral cases would not test the mask.
        config = mistral()
        state = rf.random_state(config, seed=3)
        ids = torch.tensor(tokens_for("window", 64))
        embeds = torch.nn.functional.embedding(ids, rf.embedding_matrix(state, config))
        windowed = rf.forward(state, config, embeds)
        full = rf.forward(state, mistral(sliding_window=None), embeds)
        self.assertGreater(relative(windowed, full), 1e-3)

    def test_exported_presets_match_the_reference(self):
        for preset, flags in EXPORTED.items():
            with self.subTest(preset=preset), tempfile.TemporaryDirectory(prefix=f"export-{preset}-") as directory:
                weights, config_path = os.path.join(directory, "w.safetensors"), os.path.join(directory, "config.json")
                out_path = os.path.join(directory, "out.safetensors")
                config_vocab = 128
                tokens = ";".join(",".join(map(str, row)) for row in tokens_for(preset, config_vocab))
                # A large init spread makes the layers strongly nonlinear (a wrong pairing shows).
                run_dump(["--preset", preset, "--initializer-range", "0.2", "--seed", "7", "--float64",
                          "--layers", "2", "--tokens", tokens, "--weights-out", weights, "--config-out", config_path,
                          "--out", out_path])
                state, _ = rm.load_safetensors(weights)
                with open(config_path) as f:
                    config = json.load(f)
                self.assertEqual(config["vocab_size"], config_vocab)
                self.compare(preset, config, state, flags, out_path)


def main():
    global DUMP_BINARY
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump-binary", required=True)
    args, rest = parser.parse_known_args()
    DUMP_BINARY = os.path.abspath(args.dump_binary)
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    return 0 if program.result.wasSuccessful() and program.result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
