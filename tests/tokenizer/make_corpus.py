#!/usr/bin/env python3
"""Writes corpus.txt beside this file: the texts of the tokenizer conformance tests.

The corpus is committed; this script documents how its bytes (invalid UTF-8 included) were made.
Rerun it only to change the corpus:  python3 tests/tokenizer/make_corpus.py
"""
from pathlib import Path

lines = []
L = lines.append
# Prose.
L("The quick brown fox jumps over the lazy dog.")
L("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness...")
L("Position bias: how much each input position can influence the output — at initialization, causal attention averages uniformly over the prefix.")
L("\"Quoted,\" she said; (parenthesized) [bracketed] {braced} <angled> — em-dash – en-dash … ellipsis “smart quotes” ‘single’ «guillemets»")
L("Mr. Smith's 3rd-floor office (Room 42B) opens at 9:30 a.m.; call +1 (555) 010-9999 or e-mail j.smith@example.com, see https://example.org/a/b?c=d&e=f#g.")
# Contractions in many cases.
L("I'm, you're, he's, she'll, we've, they'd, it's, can't, won't, isn't, DON'T, WON'T, I'M, YOU'RE, It'S, We'Ve, THEY'LL, She'D")
L("don’t can’t it’s (curly apostrophes) and 'quoted' words, 'S 'T 'RE 'VE 'M 'LL 'D alone, o'clock, rock'n'roll, '90s")
# Code.
L("#include <vector>")
L("int main(int argc, char** argv) { std::vector<int> v{1, 2, 3}; for (auto& x : v) x *= 2; return v.size() != 3; }")
L("    def forward(self, x: torch.Tensor) -> torch.Tensor:")
L("        return self.proj(F.gelu(self.fc(x))) + x  # residual")
L("\tif (a && b || !c) { x->y = z::w; } else if (p != q) { return -1; }")
L("\t\t\tconst result = await fetch(`${base}/api/v1/items?id=${id}`);")
L("{\"name\": \"posbias\", \"version\": \"0.1.0\", \"list\": [1, 2.5, -3e10, null, true], \"nested\": {\"k\": \"v\"}}")
L("SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC LIMIT 10;")
L("$ for f in *.txt; do wc -l \"$f\" | awk '{print $1}'; done 2>/dev/null || echo \"failed\" >&2")
L("x=1;y=2;z=x+y*3**2//4%5^6|7&8<<9>>10;a+=b-=c*=d/=e;f==g!=h<=i>=j===k!==l")
# Whitespace runs.
L("a  b   c    d     e      f       g        h")
L("trailing spaces   ")
L("     leading spaces")
L("tabs\tbetween\t\twords\t\t\t")
L(" \t \t mixed \t  whitespace \t ")
L("        ")
L("\t")
L("")
L("line with a carriage return at the end\r")
L("a lone\rcarriage return and\r\r two")
L("space before newline-like chars: \u2028 line separator \u2029 paragraph separator")
L("no-break\u00a0space, ideographic\u3000space, thin\u2009space, narrow\u202fno-break, em\u2003space, ogham\u1680mark")
L("next line \u0085 control, zero width \u200b space, byte order \ufeff mark, word\u2060joiner, mongolian\u180evowel separator")
L("\u00a0\u00a0leading no-break spaces and trailing ideographic\u3000\u3000")
L("between punctuation: !\u0085! ?\ufeff? .\u180e. ,\u00a0, ;\u2028; before letters: a \u0085b c \ufeffd e\u0085 f\ufeff g \u180eh (JS \\s and Unicode White_Space disagree on U+0085 and U+FEFF)")
# Digits and numbers.
L("1234567890 0.5 3.14159 1,000,000 1e-9 0xDEADBEEF 2024-06-01T12:34:56Z 1st 2nd 3rd 4th 100%")
L("phone 555-0199, pi≈3.1415926535897932384626433832795028841971693993751058209749445923")
L("fullwidth ０１２３４５６７８９, Arabic-Indic ٠١٢٣٤٥٦٧٨٩, Devanagari ०१२३४५६७८९, superscripts ² ³ ¹, fractions ½ ¼ ¾, Roman Ⅻ ⅷ, circled ①②③")
# CJK and other scripts.
L("我们研究变换器模型中的位置偏差：每个输入位置对输出有多大影响？")
L("日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。ｶﾀｶﾅ（半角）も。")
L("한국어 문장입니다. 위치 편향을 측정합니다.")
L("GPT模型和Qwen2模型2024年发布，参数量0.5B～72B。")
L("Русский текст: съешь же ещё этих мягких французских булок, да выпей чаю.")
L("Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Σίσυφος ΣΊΣΥΦΟΣ")
L("العربية: مرحبا بالعالم! עברית: שָׁלוֹם עוֹלָם")
L("हिन्दी: नमस्ते दुनिया। বাংলা: হ্যালো ওয়ার্ল্ড। ภาษาไทย: สวัสดีชาวโลก")
L("Tiếng Việt: Xin chào thế giới. ქართული: გამარჯობა. Հայերեն: Բարեւ. አማርኛ: ሰላም")
L("Ǆ ǅ ǆ ǈ ß ẞ ﬁ ﬂ ŉ İ ı, singletons NFC replaces: \u212b→\u00c5 \u2126→\u03a9 \u212a→K \u2000 \u1fef \u0344")
# Emoji.
L("Emoji: 😀 😃 😄 👍 👍🏽 👍🏿 ❤️ ❤ ✨ 🎉 🚀 🔥 💯")
L("ZWJ sequences: 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏾‍🚀 👁️‍🗨️ 🐻‍❄️ and flags 🇫🇷🇯🇵🇺🇸 🏴󠁧󠁢󠁳󠁣󠁴󠁿 keycaps 1️⃣ #️⃣")
L("😀😀😀😀😀😀😀😀😀😀🎉🎉🎉🎉🎉 no spaces between emoji👍and words👍🏽ok")
# Combining marks (NFC composes some of these).
L("decomposed: e\u0301 a\u0300 o\u0308 n\u0303 c\u0327 A\u030a (NFC composes each), composed: é à ö ñ ç Å")
L("stacked marks: a\u0308\u0301 q\u0307\u0323 e\u0323\u0302 (order matters: \u1ebf vs e\u0302\u0301)")
L("Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333 zalgo text")
L("Hangul jamo: \u1112\u1161\u11ab\u1100\u1173\u11af (NFC composes to 한글), Vietnamese decomposed: Vie\u0323\u0302t")
L("Devanagari with nukta: \u0915\u093c \u0916\u093c (NFC keeps these decomposed), Hebrew points: \u05e9\u05c1\u05b8")
L("combining at the start: \u0301 alone, after space \u0300, after digit 5\u20dd, after punctuation !\u0303")
# Special and added tokens inside text.
L("<|endoftext|>")
L("Document one.<|endoftext|>Document two.<|endoftext|> spaced <|endoftext|>")
L("<|im_start|>system You are helpful.<|im_end|><|im_start|>user Hi!<|im_end|><|im_start|>assistant")
L("partial <|endoftext| and <|im_end and |im_start|> and <|endoftext|><|endoftext|> doubled")
L("<think>reasoning</think> <tool_call>{\"name\": \"f\"}</tool_call> <|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>")
# SentencePiece-style tokenizers (Llama 2, Mistral): their special tokens, characters outside a
# 32k vocabulary (byte fallback, <0xNN>), control characters and carriage returns, and spaces
# around special tokens (each section between special tokens gets its own "▁").
L("<s>[INST] What is position bias? [/INST] How much each position can move the output.</s>")
L("</s><s>  <unk> text after specials <s> </s>")
L("byte fallback: 🦙 Ꙋ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ☃ 𓀀 ꙮ ᚠᛇᚻ \x01\x02\x7f controls, NUL-free")
L("carriage return\r in the middle and at the end\r")
L("▁ already a metaspace ▁▁ twice, and <0x41> written out")
# Markup.
L("# Heading\t**bold** _italic_ `code` [link](http://a.b) ![img](x.png) > quote | table | row |")
L("<html><body><p class=\"x\">Hello &amp; goodbye &lt;3 &#x1F600;</p></body></html>")
L("Math: ∑_{i=1}^{n} x_i² ≤ ∫₀^∞ e^{-x} dx = 1, ∀ε>0 ∃δ: |x−y|<δ ⇒ |f(x)−f(y)|<ε; √2 ≈ 1.414; ≠ ≡ ∞ ∂ ∇")
L("Currency: $100 €99,99 £5 ¥1000 ₹500 ₿0.01 ¢ ₩ ₽; symbols © ® ™ § ¶ † ‡ • ° ± × ÷")
L("Punctuation runs: !!! ??? ... --- ___ *** ### @@@ $$$ %%% ^^^ &&& ((( ))) ;;; ::: ,,, ''' \"\"\" ~~~ ``` |||")
L("Repeated words words words and letters aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbb zzzzzzzzzz")
# Long lines.
sentences = [
    "The model attends to every earlier token with nearly equal weight at initialization",
    "so the first positions receive a share of influence from every later layer",
    "while the residual stream keeps a spike of recency at the very last token",
    "and the middle of a long context is where information is most easily lost",
    "Measured Jacobian norms agree with the closed form to within a few percent",
]
long_prose = []
for i in range(60):
    long_prose.append(f"{sentences[i % 5]} (case {i}, depth {12 + i % 7}, alpha 0.{i % 10}5);")
L(" ".join(long_prose))
L("a" * 3000)
L("word" + " " * 2000 + "word")
L("!" * 1500 + "?" * 500)
L("".join(str((i * 7919) % 10) for i in range(2000)))
L("中文" * 800)
L("😀" * 500 + "👩‍💻" * 200)
L("\t" * 300 + "x" + "\t " * 300)
L(("line-ish text with many separators/slashes\\backslashes|pipes;" * 40))
# Invalid UTF-8 (appended as bytes below).
out = "\n".join(lines).encode("utf-8") + b"\n"
invalid = [
    b"invalid Latin-1 caf\xe9 and na\xefve r\xe9sum\xe9 bytes",
    b"stray continuation \x80 bytes \x80\xbf\x80 and lone lead \xc3 then space",
    b"overlong \xc0\xaf \xe0\x80\xaf \xf0\x80\x80\xaf, surrogate \xed\xa0\x80\xed\xbf\xbf, beyond U+10FFFF \xf4\x90\x80\x80 \xf5\x80",
    b"truncated emoji \xf0\x9f\x98 then text, truncated three-byte \xe2\x82 end, at end of line \xe4\xb8",
    b"\xff\xfe\xfd\xfc invalid bytes \xfe\xff only",
    b"mixed valid \xe4\xb8\xad\xe6\x96\x87 and invalid \xe4\xb8 \xe6 \xad\xe6\x96\x87 in CJK",
]
out += b"\n".join(invalid) + b"\n"
tail = [
    "After the invalid lines: plain text again, 1 2 3.",
    "The end.",
]
out += "\n".join(tail).encode("utf-8") + b"\n"
(Path(__file__).resolve().parent / "corpus.txt").write_bytes(out)
print("corpus.txt:", len(out), "bytes,", out.count(b"\n"), "lines")
