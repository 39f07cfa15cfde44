#!/usr/bin/env python3
"""Writes the seed corpus of the libFuzzer harnesses (corpus/<harness>/), committed beside it.

    python3 tests/fuzz/libfuzzer/make_corpus.py   # from the repository root; needs protoc

Proto requests are written in text format below and encoded with `protoc --encode` against
proto/posbias/v1/*.proto; the first byte of each proto seed selects the RPC the harness runs (see
each harness's header). Safetensors seeds are whole files (length prefix, JSON header, data),
deep nesting included; config.json seeds are the published GPT-2 and Qwen2-0.5B configs and
variations; tokenizer.json seeds are small byte-level (GPT-2 and Qwen2 splits) and SentencePiece
style tokenizers, each alone and with texts (valid, invalid UTF-8, special tokens, empty). Rerun after a proto change; a crash found by fuzzing goes to regressions/<harness>/,
not here.
"""
import json
import os
import shutil
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PROTO_DIR = os.path.join(ROOT, "proto")


def encode(message, proto, text):
    return subprocess.run(
        ["protoc", f"--encode=posbias.v1.{message}", f"-I{PROTO_DIR}", os.path.join(PROTO_DIR, "posbias", "v1", proto)],
        input=text.encode(), stdout=subprocess.PIPE, check=True).stdout


def write(harness, name, data):
    path = os.path.join(HERE, "corpus", harness)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "wb") as out:
        out.write(data)


# ---- safetensors_header ----------------------------------------------------------------------

def safetensors(header, data=b"", pad=True):
    text = json.dumps(header, separators=(",", ":")).encode() if not isinstance(header, (bytes, str)) else (
        header.encode() if isinstance(header, str) else header)
    if pad:
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def nested(depth, open_="[", close="]"):
    return open_ * depth + close * depth


def safetensors_seeds():
    f32 = struct.pack("<6f", 1.0, -2.0, 3.5, 0.25, 8.0, -0.0)
    f16 = struct.pack("<4H", 0x3C00, 0x7C00, 0x0001, 0x7E00)
    yield "two_tensors", safetensors({
        "__metadata__": {"format": "pt"},
        "h.0.attn.c_attn.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "h.0.ln_1.bias": {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]}}, f32 + f16)
    yield "dtypes", safetensors({
        "s": {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]},
        "e": {"dtype": "F32", "shape": [0, 7], "data_offsets": [2, 2]},
        "d": {"dtype": "F64", "shape": [2], "data_offsets": [2, 18]},
        "i": {"dtype": "I64", "shape": [2, 1], "data_offsets": [18, 34]},
        "b": {"dtype": "BOOL", "shape": [3], "data_offsets": [34, 37]}}, bytes(range(37)))
    yield "overlap", safetensors({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12))
    yield "huge_shape", safetensors({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})
    yield "empty_header", safetensors({})
    yield "length_past_end", struct.pack("<Q", 1 << 40) + b"{}"
    yield "short", b"\x02\x00\x00"
    # Nesting: at the limit (64 levels), one past it, and far past it, in tensors and metadata.
    for depth in (63, 64, 65, 2000):
        yield f"nested_arrays_{depth}", safetensors('{"a":' + nested(depth) + "}")
    yield "nested_objects_100", safetensors('{"a":' + nested(100, '{"k":', "}").replace("}", "", 1) + "}")
    yield "nested_metadata_70", safetensors('{"__metadata__":{"x":' + nested(70) + "}}")
    yield "nested_shape_65", safetensors('{"a":{"dtype":"F32","shape":' + nested(65) + ',"data_offsets":[0,0]}}')


# ---- config_json -----------------------------------------------------------------------------

GPT2 = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
    "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None,
    "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
    "summary_use_proj": True, "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257}
QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 131072, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936}


def config_seeds():
    yield "gpt2", json.dumps(GPT2, indent=2).encode()
    yield "qwen2_0_5b", json.dumps(QWEN2, indent=2).encode()
    yield "gpt2_medium", json.dumps(dict(GPT2, n_embd=1024, n_head=16, n_layer=24)).encode()
    yield "qwen2_tiny", json.dumps({"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64,
                                    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
                                    "vocab_size": 128, "max_position_embeddings": 512}).encode()
    yield "gpt2_n_inner_float", json.dumps(dict(GPT2, n_inner=3072.5)).encode()
    yield "gpt2_strings", json.dumps(dict(GPT2, n_layer="12")).encode()
    yield "qwen2_missing_heads", json.dumps({k: v for k, v in QWEN2.items() if k != "num_attention_heads"}).encode()
    # 2025-26's rows, with the keys that steer their per-layer patterns and scalings.
    small = {"num_hidden_layers": 4, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 48, "vocab_size": 64, "max_position_embeddings": 64}
    yield "qwen3_windows", json.dumps(dict(small, model_type="qwen3", head_dim=16, use_sliding_window=True,
                                           sliding_window=4, max_window_layers=1)).encode()
    yield "gemma2_softcaps", json.dumps(dict(small, model_type="gemma2", head_dim=16, attn_logit_softcapping=50.0,
                                             final_logit_softcapping=30.0, query_pre_attn_scalar=16,
                                             layer_types=["sliding_attention", "full_attention"] * 2)).encode()
    yield "gemma3_bases", json.dumps(dict(small, model_type="gemma3_text", rope_local_base_freq=10000.0,
                                          sliding_window_pattern=2, rope_scaling={"rope_type": "linear", "factor": 8.0})).encode()
    yield "phi3_longrope", json.dumps(dict(small, model_type="phi3", partial_rotary_factor=0.5,
                                           original_max_position_embeddings=8,
                                           rope_scaling={"type": "longrope", "short_factor": [1, 1],
                                                         "long_factor": [2, 3]})).encode()
    yield "smollm3_nope", json.dumps(dict(small, model_type="smollm3", no_rope_layers=[1, 0, 1, 0])).encode()
    yield "granite_multipliers", json.dumps(dict(small, model_type="granite", embedding_multiplier=12.0,
                                                 attention_multiplier=0.0, logits_scaling=8.0)).encode()
    yield "unknown_type", b'{"model_type": "llama", "hidden_size": 4096}'
    yield "not_object", b"[1, 2, 3]"
    yield "nested_64", ('{"model_type": "gpt2", "x": ' + nested(63) + "}").encode()
    yield "nested_65", ('{"model_type": "gpt2", "x": ' + nested(64) + "}").encode()
    yield "nested_deep", ('{"model_type": "gpt2", "x": ' + nested(3000, '{"a":', "}").replace("}", "1}", 1) + "}").encode()


# ---- density_requests (byte 0: 0 continuum, 1 discrete, 2 summarize, 3 fit) -----------------

DENSITY = [
    (0, "continuum_grid", "EvaluateContinuumRequest",
     "model { depth: 24 alpha: 0.5 } grid { start: 1e-12 stop: 1 count: 200 }"),
    (0, "continuum_points", "EvaluateContinuumRequest",
     "model { depth: 24 alpha: 0.5 } point_list { x: 0.1 x: 0.5 x: 1 } quantities: DENSITY quantities: CCDF"),
    (0, "continuum_schedule", "EvaluateContinuumRequest",
     "model { alpha_schedule { alpha: 0.1 alpha: 0.9 alpha: 1 alpha: 0 } } grid { start: 0.5 stop: 1 count: 3 spacing: LINEAR }"),
    (0, "continuum_alpha_one", "EvaluateContinuumRequest",
     "model { depth: 100000 alpha: 1 } point_list { x: 1e-300 x: 1 }"),
    (1, "discrete_stride", "EvaluateDiscreteRequest",
     "model { depth: 24 alpha: 0.5 } length: 1024 stride { start: 1 stop: 1024 step: 64 }"),
    (1, "discrete_positions", "EvaluateDiscreteRequest",
     "model { depth: 4 alpha: 0.25 } length: 16 positions { position: 1 position: 16 } profiles: INCOHERENT "
     "summary_options { quantile_levels: 0.5 quantile_levels: 0.99 }"),
    (1, "discrete_summaries_only", "EvaluateDiscreteRequest",
     "model { depth: 12 alpha: 0.7 } length: 60000 summaries_only: true "
     "summary_options { band_positions { leading_end: 10 trailing_start: 59990 } }"),
    (1, "discrete_bad_stride", "EvaluateDiscreteRequest",
     "model { depth: 2 alpha: 0.5 } length: 8 stride { start: 9 stop: 3 step: 18446744073709551615 }"),
    (2, "summarize_measured", "SummarizeProfileRequest",
     "measured { values: 0.5 values: 0.1 values: 0.1 values: 0.3 } options { band_fractions { leading: 0.25 trailing: 0.25 } }"),
    (2, "summarize_theory", "SummarizeProfileRequest",
     "theory { model { depth: 24 alpha: 0.5 } length: 512 profile: INCOHERENT }"),
    (2, "summarize_continuum", "SummarizeProfileRequest",
     "theory { model { depth: 24 alpha: 0.5 } } options { quantile_levels: 0.5 quantile_levels: 0.9 }"),
    (3, "fit_fixed", "FitProfileRequest",
     "measured { values: 1 values: 0.5 values: 0.4 values: 0.35 values: 0.3 values: 0.9 } quantity: WEIGHT "
     "depth { fixed: 4 } include_profiles: true"),
    (3, "fit_range", "FitProfileRequest",
     "measured { values: 3 values: 1 values: 0.8 values: 0.7 values: 2 } models: COHERENT depth { range { min: 1 max: 8 } }"),
]

# ---- job_requests (byte 0 mod 3: 0 submit, 1 list, 2 result; submit's bits 2-4 the model) ------

JOBS = [
    (0x00, "submit_gpt2_tiny", "SubmitJobRequest",
     'spec { jacobian_norm { model: "gpt2-tiny" sequence_length: 16 samples: 2 } } labels { key: "team" value: "a" }'),
    (0x2d, "submit_given_tokens_cuda", "SubmitJobRequest",
     'spec { jacobian_norm { model: "qwen2-tiny" sequence_length: 3 output: JACOBIAN_OUTPUT_LOG_PROB '
     'input { given_tokens { sequences { token_ids: 1 token_ids: 2 token_ids: 3 next_token_id: 4 } } } } '
     'device: DEVICE_CUDA priority: 100 } request_id: "retry-1"'),
    (0x09, "submit_cesaro_hutchinson", "SubmitJobRequest",
     'spec { jacobian_norm { model: "cesaro" sequence_length: 4096 method: JACOBIAN_METHOD_HUTCHINSON probes: 8 '
     'return_raw_samples: true input { gaussian_embeddings { seed: 7 stddev: 0.5 } } } time_limit { seconds: 60 } }'),
    (0x0c, "submit_torchscript_layers", "SubmitJobRequest",
     'spec { jacobian_norm { model: "scripted" sequence_length: 8 output: JACOBIAN_OUTPUT_LAYER_SWEEP dtype: FLOAT16 } }'),
    (0x12, "submit_failed_model", "SubmitJobRequest",
     'spec { jacobian_norm { model: "broken" sequence_length: 8 } } labels { key: "BAD KEY" value: "x" }'),
    (0x01, "list_selector", "ListJobsRequest", 'label_selector: "team=a,env=prod" page_size: 10'),
    (0x01, "list_bad_selector", "ListJobsRequest", 'label_selector: "team=a,,=b,team=c"'),
    (0x02, "result_page", "GetJobResultRequest",
     'id: "j-1" first_position: 2 last_position: 8 stride: 3 page_size: 2 include_raw_samples: true include_token_ids: true'),
    (0x02, "result_bad_token", "GetJobResultRequest", 'id: "j-1" page_token: "not-a-token"'),
]

# ---- model_registration (bit 0: 0 register, 1 upload; bit 1: TorchScript allowed) ------------

MODELS = [
    (0, "register_preset", "RegisterModelRequest",
     'name: "tiny" preset { preset: "gpt2-tiny" init_seed: 3 overrides { num_layers: 3 } } labels { key: "team" value: "a" }'),
    (0, "register_family_overrides", "RegisterModelRequest",
     'name: "q" preset { preset: "qwen2" overrides { hidden_size: 64 num_heads: 4 num_kv_heads: 3 mlp_width: 128 } }'),
    (0, "register_checkpoint", "RegisterModelRequest", 'name: "ckpt" checkpoint { path: "gpt2-tiny" } request_id: "r-1"'),
    (0, "register_checkpoint_escape", "RegisterModelRequest", 'name: "out" checkpoint { path: "escape/etc" }'),
    (0, "register_checkpoint_dotdot", "RegisterModelRequest", 'name: "up" checkpoint { path: "../data0/models.json" }'),
    (0, "register_checkpoint_broken", "RegisterModelRequest", 'name: "broken" checkpoint { path: "broken" }'),
    (0, "register_builtin_name", "RegisterModelRequest", 'name: "gpt2" preset { preset: "gpt2" }'),
    (2, "register_torchscript", "RegisterModelRequest",
     'name: "ts" torchscript { path: "scripted.pt" shape { hidden_size: 16 } } ablations { no_mlp: true }'),
    (0, "register_huge", "RegisterModelRequest",
     'name: "big" preset { preset: "gpt2" overrides { num_layers: 1024 hidden_size: 16384 num_heads: 256 } }'),
    (1, "upload_gpt2", "UploadModelRequest",
     'metadata { name: "up" config_json: "{\\"model_type\\": \\"gpt2\\", \\"n_layer\\": 2, \\"n_embd\\": 64, \\"n_head\\": 4}" '
     'total_bytes: 12 labels { key: "k" value: "v" } }'),
    (1, "upload_bad_name", "UploadModelRequest", 'metadata { name: "-Bad" config_json: "{}" }'),
]


# ---- tokenizer_json (the tokenizer.json, a NUL, then the text) --------------------------------

def bytes_to_unicode():
    """GPT-2's map of the 256 bytes to printable characters (byte-level BPE's alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def byte_level_tokenizer(merges, pre_tokenizer, added=()):
    alphabet = bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)}
    for merge in merges:
        vocab.setdefault(merge.replace(" ", ""), len(vocab))
    return {"version": "1.0", "normalizer": None, "pre_tokenizer": pre_tokenizer, "post_processor": None,
            "decoder": {"type": "ByteLevel"},
            "added_tokens": [{"id": len(vocab) + i, "content": content, "special": True, "normalized": False,
                              "lstrip": False, "rstrip": False, "single_word": False} for i, content in enumerate(added)],
            "model": {"type": "BPE", "vocab": vocab, "merges": list(merges), "unk_token": None}}


def sentencepiece_tokenizer():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for token in ("\u2581", "h", "e", "l", "o", "\u2581h", "el", "\u2581hel", "lo", "\u2581hello"):
        vocab[token] = len(vocab)
    space = "\u2581"  # SentencePiece's space.
    return {"version": "1.0", "post_processor": None,
            "added_tokens": [{"id": i, "content": c, "special": True, "normalized": False, "lstrip": False,
                              "rstrip": False, "single_word": False} for i, c in enumerate(("<unk>", "<s>", "</s>"))],
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": space},
                                                               {"type": "Replace", "pattern": {"String": " "},
                                                                "content": space}]},
            "pre_tokenizer": None,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": space}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "vocab": vocab,
                      "merges": [space + " h", "e l", space + "h el", "l o", space + "hel lo"],
                      "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True}}


QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")


def tokenizer_seeds():
    qwen = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    gpt2 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    merges = ["h e", "l l", "he ll", "hell o", "\u0120 w", "o r"]
    files = {
        "byte_level_qwen_split": byte_level_tokenizer(merges, qwen, added=("<|endoftext|>", "<|im_start|>")),
        "byte_level_gpt2": byte_level_tokenizer(merges, gpt2, added=("<|endoftext|>",)),
        "sentencepiece_legacy": sentencepiece_tokenizer(),
    }
    texts = [b"hello world <|endoftext|>", b"caf\xc3\xa9 \xff\xfe broken \xe2\x82", b"  hello\n\n12345 <s> </s>", b""]
    for name, tokenizer in files.items():
        text = json.dumps(tokenizer, ensure_ascii=False).encode()
        yield name, text
        for i, extra in enumerate(texts):
            yield "%s_text%d" % (name, i), text + b"\0" + extra
    yield "not_json", b"{\"model\": "
    yield "wordpiece", json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0}}}).encode()


def main():
    for harness in ("safetensors_header", "config_json", "density_requests", "job_requests", "model_registration",
                    "tokenizer_json"):
        shutil.rmtree(os.path.join(HERE, "corpus", harness), ignore_errors=True)
    for name, data in safetensors_seeds():
        write("safetensors_header", name, data)
    for name, data in config_seeds():
        write("config_json", name, data)
    for name, data in tokenizer_seeds():
        write("tokenizer_json", name, data)
    for harness, proto, seeds in (("density_requests", "density_service.proto", DENSITY),
                                  ("job_requests", "job_service.proto", JOBS),
                                  ("model_registration", "model_service.proto", MODELS)):
        for selector, name, message, text in seeds:
            write(harness, name, bytes([selector]) + encode(message, proto, text))


if __name__ == "__main__":
    main()
