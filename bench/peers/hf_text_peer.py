"""The PyTorch + transformers side of `hotpath bench text`.

--mode embed: sentence embeddings as users compute them, SentenceTransformer(--model, device="cpu")
.encode(lines, batch_size, normalize_embeddings=True, convert_to_numpy=True) (sentence-transformers
sorts by length inside encode), on the lines of --lines-file ('\n'-separated, as hotpath read them),
--threads torch threads, fp32. Model loading and one warm-up batch are untimed, as on hotpath's side.
Prints one JSON object: sentences_per_s, seconds, versions; --embeddings-out FILE also gets the
embeddings as raw float32 [N, H] (row-major) for hotpath's agreement check.

--mode finetune (default): fine-tuning steps of
BertForSequenceClassification, eager (no torch.compile), in a python training loop — the transformers side
of `hotpath bench text --part finetune`, whose hotpath side runs hotpath's real training loop
(hotpath::train::train on a text recipe, benchmark mode) on text shards it packs with the same shapes.

The same step on both sides: model shape (--config: the config.json of the model directory hotpath
trains; BERT-base without it), batch × --seq-len tokens, all attended (hotpath's samples are exactly
seq-len tokens long), --num-labels classes, optimizer AdamW lr 2e-5, weight decay 0.01 on every parameter,
betas (0.9, 0.999), eps 1e-8, constant lr, no clipping; precision (torch.autocast("cpu", torch.bfloat16)
around forward + loss, as the HF Trainer's bf16=True does, or fp32); dropout as in the config (train
mode); threads. What differs, by design: the peer's batches are pre-made tensors (random token ids and
labels from a seeded generator, no data loading), hotpath's come through its text loader, which is
timed as part of its step.
With --prefix-tokens N the model is wrapped in peft.get_peft_model(PrefixTuningConfig(SEQ_CLS, N tokens,
--prefix-projection)): the frozen encoder, the prefix and the head train, as hotpath's model.prefix_tokens.
Times --warmup steps untimed, then --steps steps (forward, loss, backward, optimizer step, zero_grad).
Prints one JSON object: samples_per_s, step_s, forward/backward/optimizer fractions, versions.
"""
import argparse
import json
import os
import time

os.environ.setdefault("TQDM_DISABLE", "1")  # no "Loading weights" bars between hotpath's per-run lines

import torch
import transformers


def embed(a):
    import numpy as np
    import sentence_transformers

    torch.set_num_threads(a.threads)
    with open(a.lines_file, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    model = sentence_transformers.SentenceTransformer(a.model, device="cpu")
    kwargs = dict(batch_size=a.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    model.encode(lines[: a.batch_size], **kwargs)  # warm-up, untimed
    start = time.perf_counter()
    emb = model.encode(lines, **kwargs)
    seconds = time.perf_counter() - start
    if a.embeddings_out:
        np.ascontiguousarray(emb, dtype="<f4").tofile(a.embeddings_out)
    print(json.dumps({
        "peer": f"sentence-transformers {sentence_transformers.__version__} SentenceTransformer.encode, "
                f"transformers {transformers.__version__}, torch {torch.__version__}",
        "sentences_per_s": len(lines) / seconds,
        "seconds": seconds,
        "lines": len(lines),
        "dimension": int(emb.shape[1]),
    }))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["finetune", "embed"], default="finetune")
    p.add_argument("--model", default="", help="embed: sentence-transformers model directory")
    p.add_argument("--lines-file", default="", help="embed: the sentences, one per line")
    p.add_argument("--embeddings-out", default="", help="embed: write the embeddings here (raw float32)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--precision", choices=["bf16", "fp32", "fp16"], default="bf16")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: model and batches on cuda:0, torch.autocast('cuda'), fp16 with torch.amp.GradScaler")
    p.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")
    p.add_argument("--config", default="", help="config.json of the model shape (default: BERT-base)")
    p.add_argument("--num-labels", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix-tokens", type=int, default=0,
                   help="prefix tuning (peft PrefixTuningConfig, SEQ_CLS) with this many virtual tokens; 0 = full")
    p.add_argument("--prefix-projection", action="store_true", help="with --prefix-tokens: the reparameterisation MLP")
    a = p.parse_args()
    if a.mode == "embed":
        embed(a)
        return

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.config:
        config = transformers.BertConfig.from_json_file(a.config)
    else:
        config = transformers.BertConfig()  # bert-base-uncased's shape: 12 × 768, 12 heads, 3072, vocab 30522
    config.num_labels = a.num_labels
    model = transformers.BertForSequenceClassification._from_config(config, attn_implementation=a.attn)
    if a.precision == "fp16" and a.device != "cuda":
        raise SystemExit("hf_text_peer: --precision fp16 needs --device cuda")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("hf_text_peer: --device cuda but torch.cuda.is_available() is False")
    device = torch.device(a.device)
    if a.prefix_tokens > 0:
        import peft
        model = peft.get_peft_model(model, peft.PrefixTuningConfig(
            task_type="SEQ_CLS", num_virtual_tokens=a.prefix_tokens, prefix_projection=a.prefix_projection,
            encoder_hidden_size=config.hidden_size))
    model.to(device)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-5, weight_decay=0.01)
    scaler = torch.amp.GradScaler("cuda", enabled=a.precision == "fp16")
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)

    # CUDA work is asynchronous: one synchronisation per step (as hotpath's loop, whose loss.item() waits once
    # a step); the forward/backward fractions are then launch times, not GPU times, on CUDA.
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
    gen = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(1000, config.vocab_size, (a.batch_size, a.seq_len), generator=gen)
    mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)
    labels = torch.randint(0, a.num_labels, (a.batch_size,), generator=gen)
    ids, mask, types, labels = (t.to(device) for t in (ids, mask, types, labels))

    fwd = bwd = optim = 0.0
    start = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            start = time.perf_counter()
            fwd = bwd = optim = 0.0
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            logits = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
            loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        t1 = time.perf_counter()
        scaler.scale(loss).backward()
        t2 = time.perf_counter()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sync()
        t3 = time.perf_counter()
        fwd += t1 - t0
        bwd += t2 - t1
        optim += t3 - t2
    total = time.perf_counter() - start
    print(json.dumps({
        "peer": f"transformers {transformers.__version__} BertForSequenceClassification attn={a.attn}, torch {torch.__version__}"
                + (f", peft prefix tuning ({a.prefix_tokens} tokens{', MLP' if a.prefix_projection else ''})"
                   if a.prefix_tokens > 0 else "")
                + (f", {torch.cuda.get_device_name(0)} {a.precision} autocast" if device.type == "cuda" else ""),
        "samples_per_s": a.batch_size * a.steps / total,
        "step_s": total / a.steps,
        "forward_fraction": fwd / total,
        "backward_fraction": bwd / total,
        "optimizer_fraction": optim / total,
        "fractions_are_gpu_times": device.type == "cpu",
        "loss": float(loss.detach()),
    }))


if __name__ == "__main__":
    main()
