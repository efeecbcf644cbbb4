#!/usr/bin/env python3
"""The Hugging Face `tokenizers` side of the tokenizer benchmark.

  tokenizer_peer.py --write-corpus FILE
      Writes the benchmark corpus, one line each: every line of Debian's fortunes and of the
      documents in Weka's Reuters ARFF files (real English text, ~80k lines).
  tokenizer_peer.py --tokenizer DIR --input FILE [--threads N] [--batch-size B] [--repeats R]
                    [--max-length L] [--pair] [--mode batch|fast]
      Encodes the lines with Tokenizer.encode_batch (mode batch: what users call; it tracks
      offsets) or encode_batch_fast (mode fast: no offsets), in batches of B, on N rayon threads,
      and prints one JSON line: lines_per_s, tokens_per_s (the fastest of R passes).
"""
import argparse
import json
import os
import sys
import time


def write_corpus(path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "oracles"))
    import tokenizer_ref  # the parity corpus readers: same files, same decoding

    lines, _ = tokenizer_ref.fortune_texts()
    for doc in tokenizer_ref.reuters_documents():
        lines.extend(line for line in doc.split("\n") if line.strip())
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line.replace("\r", " ") + "\n")
    print(json.dumps({"lines": len(lines), "path": path}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write-corpus")
    ap.add_argument("--tokenizer")
    ap.add_argument("--input")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-length", type=int, default=0)
    ap.add_argument("--pair", action="store_true", help="input lines are 'first<TAB>second'")
    ap.add_argument("--mode", choices=["batch", "fast"], default="batch")
    args = ap.parse_args()
    if args.write_corpus:
        write_corpus(args.write_corpus)
        return

    # Rayon reads its pool size once, at first use: set it before tokenizers starts any work.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if args.threads > 1 else "false"
    import tokenizers
    from tokenizers import Tokenizer

    path = os.path.join(args.tokenizer, "tokenizer.json")
    tok = Tokenizer.from_file(path)
    tok.no_padding()
    tok.no_truncation()
    if args.max_length:
        tok.enable_truncation(args.max_length)
    with open(args.input, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    inputs = [tuple(line.split("\t", 1)) if args.pair and "\t" in line else line for line in lines]
    encode = tok.encode_batch if args.mode == "batch" else tok.encode_batch_fast
    batches = [inputs[i:i + args.batch_size] for i in range(0, len(inputs), args.batch_size)]
    best, tokens = float("inf"), 0
    for _ in range(max(args.repeats, 1)):
        # Only the encode calls are timed: reading .ids (a python list per line) is left out.
        seconds, count = 0.0, 0
        for batch in batches:
            start = time.perf_counter()
            encodings = encode(batch)
            seconds += time.perf_counter() - start
            count += sum(len(e) for e in encodings)
        best = min(best, seconds)
        tokens = count
    print(json.dumps({"peer": f"tokenizers {tokenizers.__version__} encode_{args.mode}", "threads": args.threads,
                      "lines": len(inputs), "tokens": tokens, "seconds": best, "lines_per_s": len(inputs) / best,
                      "tokens_per_s": tokens / best}))


if __name__ == "__main__":
    main()
