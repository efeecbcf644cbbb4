"""`hotpath serve` through real clients (run by tests/cli/serve_cli_test.sh against packages img, txt, emb).

tritonclient[http] JSON and binary inference equal the engine's answers (`hotpath predict`, `hotpath embed`, the
/v1 routes on the same inputs); the KServe v2 metadata, health and readiness endpoints; every bad input of
issue 13 answered 4xx with {"error": ...} while the server keeps serving; /metrics.
Usage: serve_client_test.py HOST:PORT HOTPATH WORKDIR
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import tritonclient.http as httpclient
from PIL import Image
from tritonclient.utils import InferenceServerException

url, hotpath, work = sys.argv[1], sys.argv[2], sys.argv[3]
host, port = url.split(":")
port = int(port)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def request(method, path, body=b"", headers=None):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


client = httpclient.InferenceServerClient(url)

# ---- metadata, health, readiness ------------------------------------------------------------------------
check(client.is_server_live(), "server live")
check(client.is_server_ready(), "server ready")
meta = client.get_server_metadata()
check(meta["name"] == "hotpath" and "binary_tensor_data" in meta["extensions"] and meta["version"], f"server metadata {meta}")
for name in ("img", "txt", "emb"):
    check(client.is_model_ready(name), f"{name} ready")
    check(client.is_model_ready(name, "1"), f"{name} version 1 ready")
    check(not client.is_model_ready(name, "2"), f"{name} version 2 is not a version")
check(not client.is_model_ready("nope"), "unknown model not ready")
img_meta = client.get_model_metadata("img")
check(img_meta["name"] == "img" and img_meta["versions"] == ["1"] and img_meta["platform"] == "hotpath_fp32", f"img metadata {img_meta}")
check(img_meta["inputs"][0]["datatype"] == "FP32" and img_meta["inputs"][0]["shape"] == [-1, 3, 32, 32], f"img inputs {img_meta['inputs']}")
check(img_meta["outputs"][0]["shape"] == [-1, 4], f"img outputs {img_meta['outputs']}")
check(client.get_model_metadata("img", "1") == img_meta, "metadata of version 1")
emb_meta = client.get_model_metadata("emb")
check([i["name"] for i in emb_meta["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"], f"emb inputs {emb_meta}")
check(emb_meta["outputs"][0]["name"] == "sentence_embedding", f"emb outputs {emb_meta}")
for bad in (lambda: client.get_model_metadata("nope"), lambda: client.get_model_metadata("img", "2")):
    try:
        bad()
        check(False, "metadata of an unknown model/version raised nothing")
    except InferenceServerException as e:
        check(e.status() in ("404", 404) or "404" in str(e) or "unknown" in str(e) or "version" in str(e), f"unknown model: {e}")
status, _, body = request("GET", "/v2/health/ready")
check(status == 200 and json.loads(body) == {"ready": True}, f"ready body {status} {body}")

# ---- image model: tritonclient JSON and binary = /v1 classify = `hotpath predict` ------------------------
image_input = img_meta["inputs"][0]["name"]
image_output = img_meta["outputs"][0]["name"]
pre = json.load(open(os.path.join(work, "img", "preprocess.json")))
mean = np.array(pre["mean"], np.float32)
std = np.array(pre["std"], np.float32)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


colors = [(200, 30, 90), (10, 250, 120), (128, 128, 128)]
# A constant-colour photo preprocesses to a constant tensor per channel ((c/255 - mean) / std): the KServe
# tensor the client sends is exactly what the package's eval preprocessing makes of the PNG.
x = np.stack([np.broadcast_to(((np.array(c, np.float32) / 255 - mean) / std)[:, None, None], (3, 32, 32)) for c in colors]).astype(np.float32)
results = {}
for binary in (False, True):
    inp = httpclient.InferInput(image_input, list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput(image_output, binary_data=binary)
    res = client.infer("img", [inp], outputs=[out], request_id=f"img-{binary}")
    check(res.get_response()["id"] == f"img-{binary}", "request id echoed")
    results[binary] = res.as_numpy(image_output)
    check(results[binary].shape == (3, 4) and results[binary].dtype == np.float32, f"logits {results[binary].shape}")
check(np.array_equal(results[False], results[True]), f"JSON and binary logits differ: {results}")
# Default outputs (none asked) with binary_data_output, as tritonclient sends it.
inp = httpclient.InferInput(image_input, list(x.shape), "FP32")
inp.set_data_from_numpy(x)
res = client.infer("img", [inp])
check(np.array_equal(res.as_numpy(image_output), results[True]), "default outputs (binary) differ")

for i, c in enumerate(colors):
    png = os.path.join(work, f"color{i}.png")
    Image.new("RGB", (40, 48), c).save(png)
    status, _, body = request("POST", "/v1/models/img/classify?top_k=4", open(png, "rb").read(), {"Content-Type": "image/png"})
    check(status == 200, f"classify {status} {body[:200]}")
    top = json.loads(body)["top"]
    probs_v1 = np.zeros(4)
    for t in top:
        probs_v1[t["index"]] = t["prob"]
    check(np.allclose(probs_v1, softmax(results[True][i]), atol=1e-5), f"/v1 classify {probs_v1} vs softmax(KServe logits) {softmax(results[True][i])}")
    pred = subprocess.run([hotpath, "predict", "--model-dir", os.path.join(work, "img"), "--json", "-k", "4", "--threads", "1", png],
                          capture_output=True, text=True)
    check(pred.returncode == 0, f"hotpath predict: {pred.stderr}")
    if pred.returncode == 0:
        probs_pred = np.zeros(4)
        for t in json.loads(pred.stdout)["top"]:
            probs_pred[t["index"]] = t["prob"]
        check(np.allclose(probs_v1, probs_pred, atol=1e-5), f"/v1 classify {probs_v1} vs hotpath predict {probs_pred}")
        check(np.allclose(softmax(results[False][i]), probs_pred, atol=1e-5), "KServe JSON vs hotpath predict")

# ---- text models: KServe with hotpath's own token ids = `hotpath embed` = /v1 ------------------------------
texts = ["the cat sat on the mat", "a dog ran far away and then came back home to sleep", "cat", "zebra ! ?"]
with open(os.path.join(work, "texts.txt"), "w") as f:
    f.write("\n".join(texts) + "\n")
tok = subprocess.run([hotpath, "tokenize", "--tokenizer", os.path.join(work, "emb"), "--input", os.path.join(work, "texts.txt")],
                     capture_output=True, text=True)
check(tok.returncode == 0, f"hotpath tokenize: {tok.stderr}")
rows = [json.loads(l) for l in tok.stdout.splitlines()]
length = max(len(r["input_ids"]) for r in rows)
ids = np.zeros((len(rows), length), np.int64)
mask = np.zeros((len(rows), length), np.int64)
for i, r in enumerate(rows):
    ids[i, : len(r["input_ids"])] = r["input_ids"]
    mask[i, : len(r["input_ids"])] = 1
emb = subprocess.run([hotpath, "embed", "--model", os.path.join(work, "emb"), "--threads", "1", "--output", os.path.join(work, "emb.npy")],
                     stdin=open(os.path.join(work, "texts.txt")), capture_output=True, text=True)
check(emb.returncode == 0, f"hotpath embed: {emb.stderr}")
reference = np.load(os.path.join(work, "emb.npy"))


def text_inputs(binary, ids_dtype="INT64"):
    out = []
    for name, value in (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", np.zeros_like(ids))):
        v = value.astype(np.int32) if ids_dtype == "INT32" else value
        i = httpclient.InferInput(name, list(v.shape), ids_dtype)
        i.set_data_from_numpy(v, binary_data=binary)
        out.append(i)
    return out


for binary in (False, True):
    for dtype in ("INT64", "INT32"):  # INT32 ids widen to the model's INT64
        res = client.infer("emb", text_inputs(binary, dtype), outputs=[httpclient.InferRequestedOutput("sentence_embedding", binary_data=binary)])
        got = res.as_numpy("sentence_embedding")
        check(got.shape == reference.shape and np.allclose(got, reference, atol=1e-5),
              f"emb KServe binary={binary} {dtype} vs hotpath embed: max diff {np.abs(got - reference).max() if got.shape == reference.shape else got.shape}")
status, _, body = request("POST", "/v1/models/emb/embed", "\n".join(texts).encode(), {"Content-Type": "text/plain"})
check(status == 200, f"/v1 embed {status} {body[:200]}")
if status == 200:
    v1 = np.array(json.loads(body)["embeddings"], np.float32)
    check(np.allclose(v1, reference, atol=1e-5), "/v1 embed vs hotpath embed")
status, _, body = request("POST", "/v1/models/emb/embed", "\n".join(json.dumps({"text": t}) for t in texts).encode(),
                          {"Content-Type": "application/jsonl"})
check(status == 200 and np.allclose(np.array(json.loads(body)["embeddings"], np.float32), reference, atol=1e-5), "/v1 embed JSONL")

res = client.infer("txt", text_inputs(True))
logits = res.as_numpy(client.get_model_metadata("txt")["outputs"][0]["name"])
status, _, body = request("POST", "/v1/models/txt/classify?top_k=3", "\n".join(texts).encode(), {"Content-Type": "text/plain"})
check(status == 200, f"/v1 classify text {status} {body[:200]}")
if status == 200:
    results_v1 = json.loads(body)["results"]
    check(len(results_v1) == len(texts), "one result per text")
    for i, r in enumerate(results_v1):
        p = np.zeros(3)
        for t in r["top"]:
            p[t["index"]] = t["prob"]
            check(t["label"] == f"LABEL_{t['index']}", f"label {t}")
        check(np.allclose(p, softmax(logits[i]), atol=1e-5), f"text classify {p} vs softmax(KServe) {softmax(logits[i])}")

# ---- bad input: each a 4xx JSON error, and the server keeps serving -----------------------------------------
good_body = json.dumps({"inputs": [{"name": image_input, "shape": [1, 3, 32, 32], "datatype": "FP32", "data": x[0].ravel().tolist()}]})


def still_serving(after):
    status, _, body = request("POST", "/v2/models/img/infer", good_body)
    ok = status == 200 and np.allclose(np.array(json.loads(body)["outputs"][0]["data"], np.float32), results[False][0])
    check(ok, f"not serving after {after}: {status} {body[:200]}")


def expect_error(what, status_expected, method, path, body=b"", headers=None, contains=""):
    status, h, data = request(method, path, body, headers)
    try:
        message = json.loads(data)["error"]
    except Exception:
        message = None
    check(status == status_expected and message is not None and contains in message,
          f"{what}: expected {status_expected} with an error containing {contains!r}, got {status} {data[:300]!r}")
    still_serving(what)
    return h


def infer_body(name=None, shape=None, datatype="FP32", data=None):
    return json.dumps({"inputs": [{"name": name or image_input, "shape": shape or [1, 3, 32, 32], "datatype": datatype,
                                   "data": data if data is not None else x[0].ravel().tolist()}]})


expect_error("malformed JSON", 400, "POST", "/v2/models/img/infer", b'{"inputs": [', contains="infer request")
expect_error("wrong shape", 400, "POST", "/v2/models/img/infer", infer_body(shape=[1, 3, 16, 64]), contains="shape")
expect_error("element count", 400, "POST", "/v2/models/img/infer", infer_body(shape=[2, 3, 32, 32]), contains="data elements")
expect_error("wrong dtype", 400, "POST", "/v2/models/img/infer",
             infer_body(datatype="INT64", data=[0] * (3 * 32 * 32)), contains="datatype")
expect_error("wrong name", 400, "POST", "/v2/models/img/infer", infer_body(name="pixels"), contains="pixels")
expect_error("BYTES", 400, "POST", "/v2/models/img/infer", infer_body(datatype="BYTES", data=["a"]), contains="BYTES")
header = json.dumps({"inputs": [{"name": image_input, "shape": [1, 3, 32, 32], "datatype": "FP32",
                                 "parameters": {"binary_data_size": 3 * 32 * 32 * 4}}]}).encode()
raw = x[0].tobytes()
expect_error("truncated binary tensor", 400, "POST", "/v2/models/img/infer", header + raw[:-10],
             {"Inference-Header-Content-Length": str(len(header))}, contains="truncated")
expect_error("header length past the body", 400, "POST", "/v2/models/img/infer", header + raw,
             {"Inference-Header-Content-Length": str(len(header) + len(raw) + 1)}, contains="past the end of the body")
expect_error("header length not a number", 400, "POST", "/v2/models/img/infer", header + raw,
             {"Inference-Header-Content-Length": "12x"}, contains="Inference-Header-Content-Length")
expect_error("non-image body", 400, "POST", "/v1/models/img/classify", b"this is not a picture", {"Content-Type": "image/jpeg"},
             contains="JPEG/PNG")
expect_error("empty image body", 400, "POST", "/v1/models/img/classify", b"", contains="empty")
expect_error("text to an image model", 400, "POST", "/v1/models/img/embed", b"hello", contains="classify")
expect_error("bad JSONL", 400, "POST", "/v1/models/emb/embed", b'{"text": 5}\n', {"Content-Type": "application/jsonl"},
             contains="line 1")
expect_error("token id past the vocabulary", 400, "POST", "/v2/models/emb/infer", json.dumps({"inputs": [
    {"name": "input_ids", "shape": [1, 2], "datatype": "INT64", "data": [2, 100000]},
    {"name": "attention_mask", "shape": [1, 2], "datatype": "INT64", "data": [1, 1]},
    {"name": "token_type_ids", "shape": [1, 2], "datatype": "INT64", "data": [0, 0]}]}), contains="input_ids")
expect_error("unknown output", 400, "POST", "/v2/models/img/infer",
             json.dumps({**json.loads(infer_body()), "outputs": [{"name": "nope"}]}), contains="unknown output 'nope'")
# Shape arithmetic: no element, but strides past int64 (was a 500 carrying LibTorch's whole backtrace).
status, _, data = request("POST", "/v2/models/img/infer", infer_body(shape=[0, 2**30, 2**30, 2**30], data=[]))
check(status == 400 and b"inputs[0].shape" in data and data.count(b"\n") <= 1 and b"frame #" not in data,
      f"shape [0, 2^30, 2^30, 2^30]: expected one 400 line naming inputs[0].shape, got {status} {data[:300]!r}")
still_serving("shape [0, 2^30, 2^30, 2^30]")
# A JPEG to a text model: one 400 for the body, never "291 texts".
jpeg = open(png, "rb").read()
expect_error("an image to a text model", 400, "POST", "/v1/models/txt/classify", jpeg, {"Content-Type": "image/png"},
             contains="not text")
expect_error("binary as text/plain to a text model", 400, "POST", "/v1/models/emb/embed", b"\xff\xd8\xff\xe0\n" * 300,
             {"Content-Type": "text/plain"}, contains="not UTF-8 text")
expect_error("unknown model", 404, "POST", "/v2/models/nope/infer", infer_body(), contains="unknown model 'nope'")
expect_error("unknown version", 404, "POST", "/v2/models/img/versions/7/infer", infer_body(), contains="version")
expect_error("unknown route", 404, "GET", "/v3/whatever", contains="no route")
h = expect_error("wrong method", 405, "GET", "/v2/models/img/infer", contains="POST")
check(h.get("allow") == "POST", f"Allow header {h}")
expect_error("wrong method on metadata", 405, "POST", "/v2/models/img", b"{}", contains="GET")

# An oversized body: 413 as soon as Content-Length says so (the body is never read).
s = socket.create_connection((host, port), timeout=10)
s.sendall(b"POST /v2/models/img/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\n")
reply = s.recv(65536).decode(errors="replace")
s.close()
check(reply.startswith("HTTP/1.1 413") and '"error"' in reply, f"oversized body: {reply[:200]!r}")
still_serving("oversized body")
# A plain client sends the whole body before it reads: the server reads and drops it, so the client gets the
# 413, not a connection reset (issue 28).
for attempt in range(3):
    c = http.client.HTTPConnection(host, port, timeout=30)
    try:
        c.request("POST", "/v2/models/img/infer", body=b"x" * 3_000_000)
        r = c.getresponse()
        status, data = r.status, r.read()
    except (ConnectionError, OSError) as e:
        status, data = None, repr(e).encode()
    c.close()
    check(status == 413 and b"--max-body-bytes" in data, f"oversized body sent whole (try {attempt}): {status} {data[:200]!r}")
still_serving("oversized body sent whole")

# A slow client that never finishes its body: 408 after --request-timeout-ms (1.5 s), while others are served.
slow = socket.create_connection((host, port), timeout=10)
slow.sendall(b"POST /v2/models/img/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{\"inputs\": [")
t0 = time.time()
for _ in range(3):
    still_serving("a slow client is connected")
reply = b""
while b"\r\n\r\n" not in reply:
    chunk = slow.recv(4096)
    if not chunk:
        break
    reply += chunk
waited = time.time() - t0
check(reply.startswith(b"HTTP/1.1 408") and b"--request-timeout-ms" in reply, f"slow client: {reply[:200]!r}")
check(1.0 < waited < 8, f"slow client cut off after {waited:.1f} s (request timeout 1.5 s)")
slow.close()
still_serving("slow client")

# ---- /metrics ----------------------------------------------------------------------------------------------
status, h, body = request("GET", "/metrics")
text = body.decode()
check(status == 200 and h.get("content-type", "").startswith("text/plain; version=0.0.4"), f"metrics {status} {h}")
for needle in ('nv_inference_request_success{model="img",version="1"}', 'nv_inference_request_failure{model="img",version="1"}',
               'hotpath_requests_total{model="img",status="400"}', "hotpath_batch_size_bucket", "hotpath_request_seconds_bucket",
               'nv_inference_pending_request_count{model="emb",version="1"}'):
    check(needle in text, f"metrics lack {needle}")
# The transport's own families: the 413s and the 408 above were counted by reason, and nothing is buffered now but
# this request's own header.
transport = {l.split(" ")[0]: float(l.split(" ")[1]) for l in text.splitlines() if l.startswith("hotpath_http_")}
check(transport.get('hotpath_http_refused_total{reason="body_too_large"}', 0) >= 4, f"413s not counted: {transport}")
check(transport.get('hotpath_http_refused_total{reason="request_timeout"}', 0) >= 1, f"408 not counted: {transport}")
check(transport.get("hotpath_http_buffered_bytes", 1e9) < 4096, f"bytes still buffered at rest: {transport}")
check(transport.get("hotpath_http_max_connections") == 512 and transport.get("hotpath_http_connections", 0) >= 1,
      f"connection gauges: {transport}")

print(f"serve_client_test: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
