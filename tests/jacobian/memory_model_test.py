#!/usr/bin/python3
"""The batch plan's memory model against the peak resident memory posbias-measure measures.

posbias-measure reports, beside its results, the plan's predicted peak (jacobian::PredictMemory:
weights, one sample's embeddings, the kept activations, the largest transient) and the measured
one: the process's resident high-water mark above what it held before the model was built. This
test runs real measurements from L = 1,024 to 32,768 and holds the two within 25 %:

  - a Mistral-shaped model (2 layers, width 256, 4 heads, 2 kv heads, MLP 512, window 256; time
    linear in L), Hutchinson K = 8 in float32, L = 1k, 2k, 4k, 8k, 16k and 32k;
  - a Llama-shaped model with full attention (width 64, head_dim 64), the same estimate at 1k-4k;
  - a Gemma-3-shaped model (2 layers, one sliding with window 256 and one full; sandwich norms,
    q/k norms, head_dim 64, 1 kv head) and an OLMo-2-shaped one (norms after each branch, q/k norms
    over the whole projection), Hutchinson K = 8 in float32, L = 1k, 4k and 8k;
  - exact norms in float64 (64 rows: the MLP's per-position Jacobians and calls of many rows) of
    the Llama and of a GPT-2-shaped model at L = 1k and 2k;
  - the loss gradient (autograd over dense attention, the loss head's logits) of the Llama at
    1k-4k with a vocabulary of 8192, the GPT-2 in float64, and the Llama with layers recomputed;
  - the loss gradient through the model's own pass (one row entering every position) of the
    Llama at 4k and 8k, about linear in L.

Usage: /usr/bin/python3 tests/jacobian/memory_model_test.py --measure-binary build/release/server/posbias-measure
About two minutes on two cores; every run is bounded by a timeout.
"""

import argparse
import json
import subprocess
import sys
import unittest

ARGS = None
RUN_TIMEOUT_S = 240
BOUND = 0.25

MISTRAL = ("--arch", "mistral", "--layers", "2", "--width", "256", "--heads", "4", "--kv-heads", "2",
           "--mlp-width", "512", "--vocab", "128", "--max-positions", "32768", "--sliding-window", "256")
LLAMA = ("--arch", "llama", "--layers", "2", "--width", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
         "--mlp-width", "128", "--vocab", "128", "--max-positions", "4096")
LLAMA_LONG = tuple("32768" if previous == "--max-positions" else flag
                   for previous, flag in zip(("",) + LLAMA, LLAMA))
GEMMA3 = ("--preset", "gemma3-tiny", "--width", "256", "--heads", "4", "--kv-heads", "1", "--head-dim", "64",
          "--mlp-width", "512", "--vocab", "128", "--max-positions", "8192", "--sliding-window", "256")
OLMO2 = ("--preset", "olmo2-tiny", "--width", "256", "--heads", "4", "--kv-heads", "4", "--mlp-width", "512",
         "--vocab", "128", "--max-positions", "8192")
GPT2 = ("--arch", "gpt2", "--layers", "2", "--width", "64", "--heads", "4", "--mlp-width", "256",
        "--vocab", "128", "--max-positions", "4096")


def large_vocabulary(model):
    """The model with a vocabulary of 8192 (the loss head's logits then count)."""
    return tuple("8192" if previous == "--vocab" else flag for previous, flag in zip(("",) + model, model))


HUTCHINSON = ("--method", "hutchinson", "--probes", "8", "--dtype", "float32")
LOSS = ("--output", "loss", "--method", "exact")
EXACT = ("--method", "exact", "--dtype", "float64")


def memory_of(model, length, method):
    command = [ARGS.measure_binary, *model, *method, "--length", str(length), "--samples", "1",
               "--threads", "2", "--seed", "0", "--input-seed", "7"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)["memory"]


class MemoryModelTest(unittest.TestCase):
    def check(self, name, model, lengths, method):
        """The memory reports, one per length, each within the bound."""
        reports = []
        for length in lengths:
            with self.subTest(model=name, length=length):
                memory = memory_of(model, length, method)
                predicted, measured = memory["predicted_peak_bytes"], memory["measured_peak_bytes"]
                self.assertIsNotNone(measured, "the kernel did not let the peak be reset")
                ratio = measured / predicted
                print(f"{name} L={length}: predicted {predicted / 2**20:.1f} MiB, "
                      f"measured {measured / 2**20:.1f} MiB, ratio {ratio:.2f}", file=sys.stderr)
                self.assertLessEqual(abs(ratio - 1.0), BOUND, memory)
                reports.append(memory)
        return reports

    def test_a_windowed_model_from_1k_to_32k_positions(self):
        self.check("mistral-256", MISTRAL, [1024, 2048, 4096, 8192, 16384, 32768], HUTCHINSON)

    def test_full_attention_from_1k_to_4k_positions(self):
        self.check("llama", LLAMA, [1024, 2048, 4096], HUTCHINSON)

    def test_todays_rows_from_1k_to_8k_positions(self):
        self.check("gemma3-256", GEMMA3, [1024, 4096, 8192], HUTCHINSON)
        self.check("olmo2-256", OLMO2, [1024, 4096, 8192], HUTCHINSON)

    def test_exact_norms_in_float64(self):
        self.check("llama exact", LLAMA, [1024, 2048], EXACT)
        self.check("gpt2 exact", GPT2, [1024, 2048], EXACT)

    def test_the_loss_gradient_through_autograd(self):
        # Dense attention in autograd's graph (heads L^2 per layer), the loss head's logits at a
        # vocabulary of 8192, float64, and layers recomputed.
        autograd = (*LOSS, "--reverse-pass", "autograd")
        self.check("llama loss", large_vocabulary(LLAMA), [1024, 2048, 4096], (*autograd, "--dtype", "float32"))
        self.check("gpt2 loss float64", large_vocabulary(GPT2), [1024], (*autograd, "--dtype", "float64"))
        self.check("llama loss recomputed", LLAMA, [2048], (*autograd, "--dtype", "float32", "--checkpointing", "on"))

    def test_the_loss_gradient_through_the_models_pass_is_linear_in_the_length(self):
        # One row entering every position: the kept activations, the head's chunked logits at a
        # vocabulary of 8192, the cotangent [L, d]. 4k and 8k here (time is quadratic: 32k takes
        # about a minute alone and several beside other tests, so bench/run_long_context.sh runs
        # it), the prediction about doubling with L.
        small, large = self.check("llama loss model pass", large_vocabulary(LLAMA_LONG), [4096, 8192],
                                  (*LOSS, "--dtype", "float32"))
        self.assertLess(large["predicted_peak_bytes"], 2.2 * small["predicted_peak_bytes"])

    def test_the_prediction_grows_linearly_in_the_length(self):
        short, long = (memory_of(MISTRAL, length, HUTCHINSON)["predicted_peak_bytes"] for length in (4096, 8192))
        self.assertLess(long, 2.2 * short)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--measure-binary", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
