"""The transformers side of bench/longformer.sh: one training step of LongformerForSequenceClassification
(forward + backward of the cross-entropy, fp32, train mode, eager, its default global first token) at one
sequence length, on random token ids, with the same config as hotpath_longformer_bench (hidden, layers, heads,
intermediate, attention_window, vocab 30522, max positions length + 2, pad 1, 2 labels). Measured as hotpath's
side is: the best of --steps steps after one warm-up, and the peak resident memory above what the process held
before the first step (ru_maxrss − RSS then). Prints one JSON line.
"""
import argparse
import json
import os
import resource
import time

import torch
import transformers


def rss_mib():
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1])
    return resident * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def main():
    p = argparse.ArgumentParser()
    for name, default in (("length", 4096), ("hidden", 384), ("layers", 6), ("heads", 12), ("intermediate", 1536),
                          ("window", 512), ("batch", 1), ("steps", 3), ("threads", 2)):
        p.add_argument(f"--{name}", type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    config = transformers.LongformerConfig(vocab_size=30522, hidden_size=a.hidden, num_hidden_layers=a.layers,
                                           num_attention_heads=a.heads, intermediate_size=a.intermediate,
                                           max_position_embeddings=a.length + 2, attention_window=a.window,
                                           pad_token_id=1, num_labels=2)
    model = transformers.LongformerForSequenceClassification(config).train()
    ids = torch.randint(3, config.vocab_size, (a.batch, a.length))
    mask = torch.ones(a.batch, a.length, dtype=torch.long)
    labels = torch.zeros(a.batch, dtype=torch.long)
    before = rss_mib()
    best = float("inf")
    for s in range(a.steps + 1):
        model.zero_grad()
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(input_ids=ids, attention_mask=mask).logits, labels)
        loss.backward()
        sec = time.perf_counter() - t0
        if s > 0:
            best = min(best, sec)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"impl": "transformers", "length": a.length, "batch": a.batch, "threads": a.threads,
                      "step_s": best, "peak_step_mib": peak - before, "transformers": transformers.__version__,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
