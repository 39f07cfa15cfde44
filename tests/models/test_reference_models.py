#!/usr/bin/python3
"""Self-tests of tests/models/reference_models.py (Debian's /usr/bin/python3 with python3-torch).

    /usr/bin/python3 tests/models/test_reference_models.py [-v]

Checks the safetensors reader/writer, causality, the Cesaro routing of uniform attention, GQA vs MHA,
the norm / activation / rotary building blocks against torch.nn.functional and explicit formulas, and
the brute-force Jacobian norms against central finite differences.
"""

import json
import math
import os
import struct
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models as rm  # noqa: E402

torch.set_num_threads(1)

ARCHS = ("gpt2", "qwen2")
ABLATIONS = (
    {},
    {"no_position_encoding": True},
    {"uniform_attention": True},
    {"no_mlp": True},
)


def tiny_config(arch, **kw):
    if arch == "gpt2":
        return rm.gpt2_config(**{**dict(n_layer=2, n_embd=16, n_head=4, n_inner=32, vocab_size=23,
                                        n_positions=16), **kw})
    return rm.qwen2_config(**{**dict(num_hidden_layers=2, hidden_size=16, num_attention_heads=4,
                                     num_key_value_heads=2, intermediate_size=24, vocab_size=23,
                                     max_position_embeddings=16, rope_theta=100.0), **kw})


def rel_err(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


class SafetensorsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_round_trip_all_dtypes(self):
        g = torch.Generator().manual_seed(1)
        t = {
            "a.f32": torch.randn(3, 5, generator=g),
            "b.f64": torch.randn(7, generator=g, dtype=torch.float64),
            "c.f16": torch.randn(2, 3, 4, generator=g).half(),
            "d.bf16": torch.randn(4, 6, generator=g).to(torch.bfloat16),
            "e.i64": torch.arange(-5, 6, dtype=torch.int64).reshape(11, 1),
            "f.scalar": torch.tensor(2.5),
            "g.empty": torch.zeros(0, 3),
        }
        rm.save_safetensors(self.path("x.safetensors"), t, metadata={"format": "pt", "k": 3})
        back, meta = rm.load_safetensors(self.path("x.safetensors"))
        self.assertEqual(meta, {"format": "pt", "k": "3"})
        self.assertEqual(set(back), set(t))
        for k, v in t.items():
            self.assertEqual(tuple(back[k].shape), tuple(v.shape), k)
            if v.dtype == torch.bfloat16:
                self.assertEqual(back[k].dtype, torch.float32)  # BF16 read as exact float32
                self.assertTrue(torch.equal(back[k], v.float()), k)
            else:
                self.assertEqual(back[k].dtype, v.dtype, k)
                self.assertTrue(torch.equal(back[k], v), k)
        back16, _ = rm.load_safetensors(self.path("x.safetensors"), bf16="bfloat16")
        self.assertEqual(back16["d.bf16"].dtype, torch.bfloat16)
        self.assertTrue(torch.equal(back16["d.bf16"], t["d.bf16"]))

    def test_store_float32_as_bf16_and_f16(self):
        x = torch.tensor([1.0, -2.0, 3.140625, 1e-3, -65504.0, 0.0, float("inf")])
        rm.save_safetensors(self.path("y.safetensors"), {"x": x, "h": x},
                            dtypes={"x": "BF16", "h": "F16"})
        back, _ = rm.load_safetensors(self.path("y.safetensors"))
        self.assertTrue(torch.equal(back["x"], x.to(torch.bfloat16).float()))
        self.assertTrue(torch.equal(back["h"], x.half()))

    def test_reads_hand_written_file(self):
        # Written from the format description, independently of save_safetensors: unsorted header,
        # non-zero offsets, BF16 bit patterns 0x3F80 (1.0), 0xC000 (-2.0), 0x4049 (3.140625).
        f32 = struct.pack("<4f", 1.5, -0.25, 8.0, 1e-7)
        bf16 = struct.pack("<3H", 0x3F80, 0xC000, 0x4049)
        i64 = struct.pack("<2q", -3, 2**40)
        f64 = struct.pack("<d", math.pi)
        f16 = struct.pack("<e", 0.5)
        data = bf16 + f32 + i64 + f64 + f16
        o = [0, len(bf16)]
        o.append(o[-1] + len(f32)); o.append(o[-1] + len(i64)); o.append(o[-1] + len(f64))
        o.append(o[-1] + len(f16))
        header = {
            "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [o[1], o[2]]},
            "__metadata__": {"m": "v"},
            "b": {"dtype": "BF16", "shape": [3], "data_offsets": [o[0], o[1]]},
            "i": {"dtype": "I64", "shape": [2], "data_offsets": [o[2], o[3]]},
            "d": {"dtype": "F64", "shape": [], "data_offsets": [o[3], o[4]]},
            "h": {"dtype": "F16", "shape": [1, 1], "data_offsets": [o[4], o[5]]},
        }
        hb = json.dumps(header).encode()
        with open(self.path("z.safetensors"), "wb") as fh:
            fh.write(struct.pack("<Q", len(hb)) + hb + data)
        t, meta = rm.load_safetensors(self.path("z.safetensors"))
        self.assertEqual(meta, {"m": "v"})
        self.assertEqual(t["w"].tolist(), [[1.5, -0.25], [8.0, torch.tensor(1e-7).item()]])
        self.assertEqual(t["b"].tolist(), [1.0, -2.0, 3.140625])
        self.assertEqual(t["i"].tolist(), [-3, 2**40])
        self.assertEqual(t["d"].item(), math.pi)
        self.assertEqual(t["h"].tolist(), [[0.5]])

    def test_writer_header_is_aligned_and_matches_torch_bf16_bits(self):
        x = torch.randn(9).to(torch.bfloat16)
        rm.save_safetensors(self.path("a.safetensors"), {"x": x})
        with open(self.path("a.safetensors"), "rb") as fh:
            raw = fh.read()
        (n,) = struct.unpack("<Q", raw[:8])
        self.assertEqual(n % 8, 0)
        self.assertEqual(raw[8 + n:], x.view(torch.int16).numpy().tobytes())

    def test_rejects_bad_offsets(self):
        hb = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
        with open(self.path("bad.safetensors"), "wb") as fh:
            fh.write(struct.pack("<Q", len(hb)) + hb + b"\0" * 16)
        with self.assertRaises(ValueError):
            rm.load_safetensors(self.path("bad.safetensors"))


class BuildingBlocksTest(unittest.TestCase):
    def test_layer_norm_matches_functional(self):
        g = torch.Generator().manual_seed(2)
        x = torch.randn(3, 5, 32, generator=g) * 3 + 1
        w, b = torch.randn(32, generator=g), torch.randn(32, generator=g)
        for eps in (1e-5, 1e-2):
            ref = F.layer_norm(x, (32,), w, b, eps)
            self.assertLess(rel_err(rm.layer_norm_explicit(x, w, b, eps), ref), 2e-6)
            self.assertTrue(torch.equal(rm.layer_norm(x, w, b, eps), ref))
            ref64 = F.layer_norm(x.double(), (32,), w.double(), b.double(), eps)
            self.assertLess(rel_err(rm.layer_norm_explicit(x.double(), w.double(), b.double(), eps), ref64), 1e-13)

    def test_rms_norm(self):
        g = torch.Generator().manual_seed(3)
        x = torch.randn(2, 4, 32, generator=g) * 5
        w = torch.randn(32, generator=g)
        eps = 1e-6
        xd = x.double()
        ref = w.double() * xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
        self.assertLess(rel_err(rm.rms_norm(x, w, eps), ref), 2e-6)
        # float16 input is normalized in float32 and cast back before the weight (HF semantics).
        xh, wh = x.half(), w.half()
        expect = wh * (xh.float() * torch.rsqrt(xh.float().pow(2).mean(-1, keepdim=True) + eps)).half()
        self.assertTrue(torch.equal(rm.rms_norm(xh, wh, eps), expect))
        self.assertLess(rel_err(rm.rms_norm(xd, w.double(), eps), ref), 1e-14)

    def test_gelu_new(self):
        x = torch.linspace(-8, 8, 1001, dtype=torch.float64)
        self.assertLess(rel_err(rm.gelu_new(x), F.gelu(x, approximate="tanh")), 1e-14)
        # ... and it is not the erf GELU
        self.assertGreater((rm.gelu_new(x) - F.gelu(x)).abs().max().item(), 1e-4)

    def test_conv1d_is_transposed_linear(self):
        g = torch.Generator().manual_seed(4)
        x, w, b = torch.randn(2, 3, 8, generator=g), torch.randn(8, 12, generator=g), torch.randn(12, generator=g)
        self.assertLess(rel_err(rm._conv1d(x, w, b), F.linear(x, w.t(), b)), 1e-6)

    def test_rotary_matches_explicit_half_split_rotation(self):
        # HF rotate_half convention: dimension i is paired with i + hd/2 (not interleaved pairs),
        # angle = pos * theta^(-2i/hd).
        hd, L, theta = 8, 6, 50.0
        g = torch.Generator().manual_seed(5)
        x = torch.randn(1, 1, L, hd, generator=g, dtype=torch.float64)
        cos, sin = rm.rotary_cos_sin(L, hd, theta, torch.float64)
        got = x * cos + rm._rotate_half(x) * sin
        want = torch.empty_like(x)
        for p in range(L):
            for i in range(hd // 2):
                ang = p * theta ** (-2.0 * i / hd)
                a, b = x[0, 0, p, i].item(), x[0, 0, p, i + hd // 2].item()
                want[0, 0, p, i] = a * math.cos(ang) - b * math.sin(ang)
                want[0, 0, p, i + hd // 2] = b * math.cos(ang) + a * math.sin(ang)
        self.assertLess(rel_err(got, want), 1e-13)
        # relative-position property of the scores
        q = torch.randn(hd, generator=g, dtype=torch.float64)
        k = torch.randn(hd, generator=g, dtype=torch.float64)

        def rot(v, p):
            return v * cos[p] + rm._rotate_half(v[None])[0] * sin[p]
        self.assertAlmostEqual((rot(q, 4) @ rot(k, 2)).item(), (rot(q, 3) @ rot(k, 1)).item(), places=12)

    def test_config_defaults(self):
        c = rm.normalize_config({"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2,
                                 "n_inner": None, "vocab_size": 5, "n_positions": 4})
        self.assertEqual((c["mlp_width"], c["eps"], c["act"], c["head_dim"]), (32, 1e-5, "gelu_new", 4))
        q = rm.normalize_config({"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 1,
                                 "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 3,
                                 "vocab_size": 5})
        self.assertEqual((q["arch"], q["kv_heads"], q["tie"], q["rope_theta"]), ("qwen2", 2, False, 10000.0))


class ModelTest(unittest.TestCase):
    def model(self, arch, seed=0, **kw):
        cfg = tiny_config(arch, **kw)
        # std 0.3 so attention is far from uniform and the Jacobians are not trivially tiny.
        return rm.random_state(cfg, seed=seed, std=0.3, random_norms=True), cfg

    def ids(self, B, L, vocab, seed):
        return torch.randint(0, vocab, (B, L), generator=torch.Generator().manual_seed(seed))

    def test_shapes_and_inputs_embeds_route(self):
        for arch in ARCHS:
            for abl in ABLATIONS:
                with self.subTest(arch=arch, **abl):
                    st, cfg = self.model(arch)
                    ids = self.ids(2, 7, 23, 1)
                    out = rm.forward(st, cfg, ids, **abl)
                    self.assertEqual(tuple(out["hidden"].shape), (2, 7, 16))
                    self.assertEqual(tuple(out["logits"].shape), (2, 7, 23))
                    self.assertEqual(len(out["layer_outputs"]), 2)
                    e = rm.embed(st, cfg, ids, **abl)
                    out2 = rm.forward(st, cfg, inputs_embeds=e, **abl)
                    self.assertTrue(torch.equal(out["hidden"], out2["hidden"]))
                    self.assertTrue(torch.isfinite(out["logits"]).all())

    def test_prefix_names_and_untied_head(self):
        st, cfg = self.model("gpt2")
        ids = self.ids(1, 5, 23, 2)
        base = rm.forward(st, cfg, ids)
        bare = {k[len("transformer."):]: v for k, v in st.items()}
        self.assertTrue(torch.equal(rm.forward(bare, cfg, ids)["logits"], base["logits"]))
        # logits are tied to wte ...
        self.assertLess(rel_err(base["logits"], base["hidden"] @ st["transformer.wte.weight"].t()), 1e-6)
        # ... unless an lm_head.weight is present
        head = torch.randn(23, 16)
        out = rm.forward({**st, "lm_head.weight": head}, cfg, ids)
        self.assertLess(rel_err(out["logits"], out["hidden"] @ head.t()), 1e-6)
        qst, qcfg = self.model("qwen2", tie_word_embeddings=True)
        self.assertNotIn("lm_head.weight", qst)
        o = rm.forward(qst, qcfg, ids)
        self.assertLess(rel_err(o["logits"], o["hidden"] @ qst["model.embed_tokens.weight"].t()), 1e-6)
        with self.assertRaises(KeyError):
            rm.forward(qst, {**qcfg, "tie_word_embeddings": False}, ids)

    def test_causal(self):
        for arch in ARCHS:
            for abl in ABLATIONS:
                with self.subTest(arch=arch, **abl):
                    st, cfg = self.model(arch, seed=3)
                    a = self.ids(2, 9, 23, 4)
                    for t in (0, 4, 7):
                        b = a.clone()
                        b[:, t + 1:] = (b[:, t + 1:] + 1 + torch.arange(8 - t)) % 23
                        oa, ob = rm.forward(st, cfg, a, **abl), rm.forward(st, cfg, b, **abl)
                        for key in ("hidden", "logits"):
                            self.assertLess((oa[key][:, :t + 1] - ob[key][:, :t + 1]).abs().max().item(), 1e-6)
                            self.assertGreater((oa[key][:, t + 1:] - ob[key][:, t + 1:]).abs().max().item(), 1e-3)

    def test_position_ablation(self):
        st, cfg = self.model("gpt2")
        ids = self.ids(1, 6, 23, 5)
        zero_wpe = {**st, "transformer.wpe.weight": torch.zeros_like(st["transformer.wpe.weight"])}
        self.assertTrue(torch.equal(rm.forward(st, cfg, ids, no_position_encoding=True)["hidden"],
                                    rm.forward(zero_wpe, cfg, ids)["hidden"]))
        # Without position information, a repeated token gets the same output at every position of a
        # sequence made of that token only (attention averages identical values).
        for arch in ARCHS:
            st, cfg = self.model(arch)
            h = rm.forward(st, cfg, torch.full((1, 6), 7), no_position_encoding=True)["hidden"][0]
            self.assertLess((h - h[0]).abs().max().item(), 1e-5)
            h = rm.forward(st, cfg, torch.full((1, 6), 7))["hidden"][0]
            if arch == "gpt2":  # learned absolute positions make the outputs differ
                self.assertGreater((h - h[0]).abs().max().item(), 1e-4)
            else:  # RoPE rotates q and k only: identical values still average to themselves
                self.assertLess((h - h[0]).abs().max().item(), 1e-5)

    def test_uniform_attention_is_cesaro_routing(self):
        # uniform_attention with zero-initialized MLP output weights: every layer's attention branch
        # at position i is the Cesaro average M[i] @ f(x) of the per-position branch f, where f(x_j)
        # is what the same layer adds when it sees x_j alone (a length-1 sequence attends only to
        # itself). Rotary does not touch values, so it must not matter either.
        for arch in ARCHS:
            for abl in ({}, {"no_position_encoding": True}):
                with self.subTest(arch=arch, **abl):
                    st, cfg = self.model(arch, seed=6)
                    for k in list(st):
                        if ".mlp.c_proj." in k or ".mlp.down_proj." in k:
                            st[k] = torch.zeros_like(st[k])
                    st = rm.cast_state(st, torch.float64)
                    ids = self.ids(2, 8, 23, 7)
                    out = rm.forward(st, cfg, ids, uniform_attention=True, return_branches=True, **abl)
                    self.assertLess(max(m.abs().max().item() for m in out["mlp_branches"]), 1e-300)
                    M = rm.cesaro_matrix(8)
                    x = out["embeddings"]
                    for layer in range(cfg.get("n_layer", cfg.get("num_hidden_layers"))):
                        one = single_layer_model(st, cfg, layer)
                        per_pos = torch.stack([
                            rm.forward(one[0], one[1], inputs_embeds=x[:, j:j + 1], uniform_attention=True,
                                       return_branches=True, **abl)["attn_branches"][0][:, 0]
                            for j in range(8)], dim=1)
                        want = torch.einsum("ij,bjd->bid", M, per_pos)
                        self.assertLess(rel_err(out["attn_branches"][layer], want), 1e-12)
                        x = out["layer_outputs"][layer]
                    # Qwen2: rotary only rotates q and k, so under uniform attention it has no effect.
                    if arch == "qwen2" and not abl:
                        off = rm.forward(st, cfg, ids, uniform_attention=True, no_position_encoding=True)
                        self.assertLess(rel_err(out["hidden"], off["hidden"]), 1e-12)

    def test_uniform_attention_jacobian_has_cesaro_structure(self):
        # The norms make the branch nonlinear, so test the routing at the Jacobian level: with
        # uniform attention the Jacobian of a 1-layer attention branch has the Cesaro structure
        # d a_i / d x_j = M[i][j] * A(x_j), A(x_j) the Jacobian of the branch on x_j alone.
        st, cfg = self.model("qwen2", seed=8, num_hidden_layers=1)
        st = rm.cast_state(st, torch.float64)
        x = torch.randn(1, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(9))

        def branch(inp):
            return rm.forward(st, cfg, inputs_embeds=inp, uniform_attention=True, no_mlp=True,
                              return_branches=True)["attn_branches"][0]
        J = torch.autograd.functional.jacobian(branch, x)[0, :, :, 0]  # [i, d, j, d]
        A = [torch.autograd.functional.jacobian(branch, x[:, j:j + 1])[0, 0, :, 0, 0] for j in range(5)]
        M = rm.cesaro_matrix(5)
        for i in range(5):
            for j in range(5):
                self.assertLess((J[i, :, j] - M[i, j] * A[j]).abs().max().item(), 1e-12)

    def test_gpt2_block_matches_torch_transformer_layer(self):
        # Independent check of GPT-2's attention (head split, 1/sqrt(head_dim), causal mask) and
        # block order: torch's pre-norm TransformerEncoderLayer with the transposed Conv1D weights.
        st, cfg = self.model("gpt2", seed=14, n_layer=1)
        st = rm.cast_state(st, torch.float64)
        p = "transformer.h.0."
        layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0,
                                                 activation=rm.gelu_new, layer_norm_eps=1e-5,
                                                 batch_first=True, norm_first=True).double().eval()
        with torch.no_grad():
            layer.self_attn.in_proj_weight.copy_(st[p + "attn.c_attn.weight"].t())
            layer.self_attn.in_proj_bias.copy_(st[p + "attn.c_attn.bias"])
            layer.self_attn.out_proj.weight.copy_(st[p + "attn.c_proj.weight"].t())
            layer.self_attn.out_proj.bias.copy_(st[p + "attn.c_proj.bias"])
            layer.linear1.weight.copy_(st[p + "mlp.c_fc.weight"].t())
            layer.linear1.bias.copy_(st[p + "mlp.c_fc.bias"])
            layer.linear2.weight.copy_(st[p + "mlp.c_proj.weight"].t())
            layer.linear2.bias.copy_(st[p + "mlp.c_proj.bias"])
            for a, b in (("norm1", "ln_1"), ("norm2", "ln_2")):
                getattr(layer, a).weight.copy_(st[p + b + ".weight"])
                getattr(layer, a).bias.copy_(st[p + b + ".bias"])
            ids = self.ids(2, 7, 23, 15)
            e = rm.embed(st, cfg, ids)
            mask = torch.triu(torch.full((7, 7), float("-inf"), dtype=torch.float64), diagonal=1)
            want = layer(e, src_mask=mask)
            got = rm.forward(st, cfg, inputs_embeds=e)["layer_outputs"][0]
        self.assertLess(rel_err(got, want), 1e-12)

    def test_gqa_equals_mha_with_repeated_kv_weights(self):
        st, cfg = self.model("qwen2", seed=10)  # 4 heads, 2 kv heads, head_dim 4
        nh, nkv, hd = 4, 2, 4
        rep = nh // nkv
        mha = dict(st)
        for i in range(2):
            for nm in ("k_proj", "v_proj"):
                p = f"model.layers.{i}.self_attn.{nm}."
                w = st[p + "weight"].reshape(nkv, hd, -1)
                mha[p + "weight"] = w.repeat_interleave(rep, dim=0).reshape(nh * hd, -1)
                mha[p + "bias"] = st[p + "bias"].reshape(nkv, hd).repeat_interleave(rep, dim=0).reshape(-1)
        mcfg = dict(cfg, num_key_value_heads=nh)
        ids = self.ids(2, 7, 23, 11)
        for abl in ABLATIONS:
            with self.subTest(**abl):
                a, b = rm.forward(st, cfg, ids, **abl), rm.forward(mha, mcfg, ids, **abl)
                self.assertLess(rel_err(a["logits"], b["logits"]), 1e-6)
        # and the wrong pairing (tile instead of interleave) differs
        bad = dict(st)
        p = "model.layers.0.self_attn.k_proj."
        bad[p + "weight"] = st[p + "weight"].reshape(nkv, hd, -1).repeat(rep, 1, 1).reshape(nh * hd, -1)
        bad[p + "bias"] = st[p + "bias"].reshape(nkv, hd).repeat(rep, 1).reshape(-1)
        for nm in ("v_proj",):
            q = f"model.layers.0.self_attn.{nm}."
            bad[q + "weight"], bad[q + "bias"] = mha[q + "weight"], mha[q + "bias"]
        for q in ("model.layers.1.self_attn.k_proj.", "model.layers.1.self_attn.v_proj."):
            bad[q + "weight"], bad[q + "bias"] = mha[q + "weight"], mha[q + "bias"]
        self.assertGreater(rel_err(rm.forward(bad, mcfg, ids)["logits"], rm.forward(st, cfg, ids)["logits"]), 1e-4)

    def test_jacobian_matches_finite_differences(self):
        for arch in ARCHS:
            for abl in ABLATIONS:
                with self.subTest(arch=arch, **abl):
                    st, cfg = self.model(arch, seed=12, n_embd=8, n_inner=16) if arch == "gpt2" else \
                        self.model(arch, seed=12, hidden_size=8, intermediate_size=12)
                    st64 = rm.cast_state(st, torch.float64)
                    ids = self.ids(2, 5, 23, 13)
                    for target in (None, 2):
                        got = rm.jacobian_sq_norms(st, cfg, ids, target=target, **abl)
                        self.assertEqual(got.dtype, torch.float64)
                        e = rm.embed(st64, cfg, ids, **abl)
                        t = 4 if target is None else target
                        want = torch.zeros(2, 5, dtype=torch.float64)
                        h = 1e-5
                        for j in range(5):
                            for m in range(8):
                                ep, em = e.clone(), e.clone()
                                ep[:, j, m] += h
                                em[:, j, m] -= h
                                col = (rm.forward(st64, cfg, inputs_embeds=ep, **abl)["hidden"][:, t]
                                       - rm.forward(st64, cfg, inputs_embeds=em, **abl)["hidden"][:, t]) / (2 * h)
                                want[:, j] += col.pow(2).sum(-1)
                        self.assertLess(rel_err(got, want), 1e-7)
                        self.assertTrue((got[:, t + 1:] == 0).all())  # causality
                        self.assertTrue((got[:, : t + 1] > 0).all())


class BaselineJacobianTest(unittest.TestCase):
    """bench/baseline_jacobian.py on tiny models it is given as files."""

    @classmethod
    def setUpClass(cls):
        import importlib.util
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                            "baseline_jacobian.py")
        spec = importlib.util.spec_from_file_location("baseline_jacobian", path)
        cls.bj = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.bj)
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def files(self, arch):
        cfg = tiny_config(arch)
        st = rm.random_state(cfg, seed=21, std=0.3, random_norms=True)
        w = os.path.join(self.tmp.name, arch + ".safetensors")
        c = os.path.join(self.tmp.name, arch + ".json")
        rm.save_safetensors(w, st)
        with open(c, "w") as f:
            json.dump(cfg, f)
        return w, c, st, cfg

    def run_bench(self, *args):
        out = os.path.join(self.tmp.name, "result.json")
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(self.bj.main(list(args) + ["--output", out, "--threads", "1"]), 0)
        with open(out) as f:
            return json.load(f)

    def expected(self, st, cfg, L, samples, seed, **abl):
        g = torch.Generator().manual_seed(seed)
        rows = [rm.jacobian_sq_norms(st, cfg, torch.randint(0, 23, (1, L), generator=g), **abl)[0]
                for _ in range(samples)]
        return torch.stack(rows)

    def test_exact_matches_brute_force(self):
        for arch in ARCHS:
            with self.subTest(arch=arch):
                w, c, st, cfg = self.files(arch)
                for chunk, abl, flags in ((0, {}, []), (5, {"uniform_attention": True}, ["--uniform-attention"])):
                    r = self.run_bench("--weights", w, "--config", c, "--length", "9", "--method", "exact",
                                       "--samples", "2", "--seed", "7", "--chunk", str(chunk), *flags)
                    want = self.expected(st, cfg, 9, 2, 7, **abl)
                    self.assertEqual(r["length"], 9)
                    self.assertTrue(r["batched_autograd"])
                    self.assertGreater(r["seconds_per_sample"], 0)
                    self.assertLess(rel_err(torch.tensor(r["sq_norm_mean"]), want.mean(0)), 1e-5)
                    self.assertLess(rel_err(torch.tensor(r["sq_norm_std"]), want.std(0)), 1e-4)

    def test_hutchinson_is_unbiased_within_its_standard_error(self):
        w, c, st, cfg = self.files("qwen2")
        r = self.run_bench("--weights", w, "--config", c, "--length", "8", "--method", "hutchinson",
                           "--probes", "400", "--samples", "1", "--seed", "3", "--dtype", "float64")
        want = self.expected(st, cfg, 8, 1, 3)[0]
        est, se = torch.tensor(r["sq_norm_mean"], dtype=torch.float64), torch.tensor(r["hutchinson_stderr_mean"], dtype=torch.float64)
        z = ((est - want) / se).abs()
        self.assertLess(z.max().item(), 5.0)
        # relative standard error is about sqrt(2/K) (Gaussian probes, THEORY.md section 6)
        self.assertLess((se / want).max().item(), 3 * math.sqrt(2 / 400))

    def test_unbatched_fallback_agrees(self):
        w, c, st, cfg = self.files("gpt2")
        ids = torch.randint(0, 23, (1, 6), generator=torch.Generator().manual_seed(1))
        a, _ = self.bj.measure_one(st, cfg, ids, "exact", 0, 16, None, {"batched": True}, {})
        b, _ = self.bj.measure_one(st, cfg, ids, "exact", 0, 16, None, {"batched": False}, {})
        self.assertLess(rel_err(a, b), 1e-6)


def single_layer_model(state, config, layer):
    """A 1-layer model made of layer ``layer`` of (state, config); final norm and head kept."""
    cfg = dict(config)
    if rm.model_type(config) == "gpt2":
        src, dst, cfg["n_layer"] = f"transformer.h.{layer}.", "transformer.h.0.", 1
        keep = lambda k: not k.startswith("transformer.h.")  # noqa: E731
    else:
        src, dst, cfg["num_hidden_layers"] = f"model.layers.{layer}.", "model.layers.0.", 1
        keep = lambda k: not k.startswith("model.layers.")  # noqa: E731
    st = {k: v for k, v in state.items() if keep(k)}
    st.update({dst + k[len(src):]: v for k, v in state.items() if k.startswith(src)})
    return st, cfg


if __name__ == "__main__":
    unittest.main()
