"""Bounded loopback load against `hotpath serve` (run by tests/cli/serve_load_cli_test.sh).

  load HOST:PORT CLIENTS REQUESTS       a fixed number of requests from a fixed number of keep-alive clients (stops by
                                        itself): every response is exactly its own answer (its id, and the output of its
                                        own input, not another request's batched with it)
  overload HOST:PORT CLIENTS REQUESTS   more clients than the queue holds: 503s come with Retry-After and a JSON error,
                                        every 200 is still its own answer
  sigterm HOST:PORT CLIENTS PID LOG     clients loop until the server goes away; SIGTERM to PID meanwhile: every request
                                        sent before the signal is answered (200 or 503, never dropped), every 200 is
                                        right, and the server's log has exactly as many 200s as the clients got
  hostile HOST:PORT PID BUDGET_MB       while slow clients trickle headers, 28 MB JSON bodies are parsed, clients hold
                                        60 MB bodies and connections pass --max-connections: the p90 of a health check
                                        and of a small infer on an open connection stay within 100x their idle median
                                        (both measured in this run), every refusal is a one-line JSON 503/408 that the
                                        client reads (no reset), and the server's peak RSS grows by less than BUDGET_MB
                                        + 80 B per value of one JSON body (one parse thread's expansion)
Inputs: the text embedder `emb` of make_packages.sh, 24 distinct token rows of lengths 3..26 (several length buckets).
Timings are printed for information only (a loaded machine); nothing here asserts an absolute time: `hostile`
asserts ratios against the idle latency measured first in the same run.
"""
import http.client
import json
import os
import signal
import sys
import threading
import time

import numpy as np

mode, url = sys.argv[1], sys.argv[2]
host, port = url.split(":")
port = int(port)
rng = np.random.default_rng(0)
inputs = []
for k in range(24):
    length = 3 + k
    ids = np.concatenate([[2], rng.integers(5, 60, length - 2), [3]]).astype(np.int64)
    inputs.append(ids)


def body_for(k, request_id, binary):
    ids = inputs[k][None, :]
    mask = np.ones_like(ids)
    types = np.zeros_like(ids)
    if not binary:
        return json.dumps({"id": request_id, "inputs": [
            {"name": n, "shape": list(v.shape), "datatype": "INT64", "data": v.ravel().tolist()}
            for n, v in (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", types))]}).encode(), {}
    header = json.dumps({"id": request_id, "inputs": [
        {"name": n, "shape": list(v.shape), "datatype": "INT64", "parameters": {"binary_data_size": v.nbytes}}
        for n, v in (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", types))],
        "outputs": [{"name": "sentence_embedding", "parameters": {"binary_data": True}}]}).encode()
    return header + ids.tobytes() + mask.tobytes() + types.tobytes(), {"Inference-Header-Content-Length": str(len(header))}


def decode(data, headers):
    hl = headers.get("inference-header-content-length")
    if hl is None:
        j = json.loads(data)
        return j, np.array(j["outputs"][0]["data"], np.float32)
    j = json.loads(data[: int(hl)])
    return j, np.frombuffer(data[int(hl):], np.float32)


def call(conn, k, request_id, binary):
    body, headers = body_for(k, request_id, binary)
    conn.request("POST", "/v2/models/emb/infer", body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, {a.lower(): b for a, b in r.getheaders()}, data


# References: each distinct input alone, one at a time.
conn = http.client.HTTPConnection(host, port, timeout=60)
reference = []
for k in range(len(inputs)):
    status, h, data = call(conn, k, f"ref-{k}", False)
    assert status == 200, (status, data[:300])
    reference.append(decode(data, h)[1])
conn.close()
reference = np.stack(reference)
gaps = [np.abs(reference[a] - reference[b]).max() for a in range(len(reference)) for b in range(a)]
assert min(gaps) > 1e-3, f"two inputs give nearly the same embedding ({min(gaps)}): the test could not tell them apart"

failures = []
lock = threading.Lock()


def own_answer(k, request_id, status, h, data):
    """'' when the response is this request's own answer, else what is wrong."""
    if status != 200:
        return f"status {status}: {data[:200]!r}"
    j, out = decode(data, h)
    if j.get("id") != request_id:
        return f"id {j.get('id')!r} for {request_id}"
    if out.shape != reference[k].shape or not np.allclose(out, reference[k], atol=1e-5):
        nearest = int(np.argmin(np.abs(reference - out).max(axis=1))) if out.shape == reference[k].shape else -1
        return f"{request_id}: not its own answer (closest to input {nearest}, expected {k})"
    return ""


def run_clients(clients, requests, accept_503):
    latencies, statuses = [], {}

    def client(c):
        conn = http.client.HTTPConnection(host, port, timeout=120)
        for i in range(requests):
            k = (c * 7 + i) % len(inputs)
            request_id = f"c{c}-{i}"
            t0 = time.perf_counter()
            status, h, data = call(conn, k, request_id, binary=(i % 2 == 0))
            dt = time.perf_counter() - t0
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                latencies.append((status, dt))
            if status == 503 and accept_503:
                if "retry-after" not in h or "error" not in json.loads(data):
                    with lock:
                        failures.append(f"{request_id}: 503 without Retry-After / JSON error: {h} {data[:200]!r}")
                if h.get("connection", "").lower() == "close":
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=120)
                continue
            problem = own_answer(k, request_id, status, h, data)
            if problem:
                with lock:
                    failures.append(problem)
        conn.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, latencies, statuses


def percentile(values, q):
    return float(np.percentile(values, q)) if values else float("nan")


if mode in ("load", "overload"):
    clients, requests = int(sys.argv[3]), int(sys.argv[4])
    wall, latencies, statuses = run_clients(clients, requests, accept_503=(mode == "overload"))
    total = clients * requests
    answered = sum(statuses.values())
    if answered != total:
        failures.append(f"{answered} answers for {total} requests")
    ok = [dt for s, dt in latencies if s == 200]
    refused = [dt for s, dt in latencies if s == 503]
    if mode == "load" and statuses.get(200, 0) != total:
        failures.append(f"statuses {statuses}")
    if mode == "overload" and not refused:
        failures.append(f"no 503 under overload: {statuses}")
    print(f"{mode}: {clients} clients x {requests} requests in {wall:.2f} s ({total / wall:.1f} req/s, loaded machine), "
          f"statuses {statuses}, 200 p50/p99 {percentile(ok, 50) * 1e3:.1f}/{percentile(ok, 99) * 1e3:.1f} ms, "
          f"503 p99 {percentile(refused, 99) * 1e3:.1f} ms")
elif mode == "sigterm":
    clients, pid, log = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    outcomes = []      # (request id, sent_before_signal, status or error)
    signalled = threading.Event()
    got_200 = [0]
    in_flight_at_signal = []  # statuses of requests sent before the signal and answered after it

    def client(c):
        conn = http.client.HTTPConnection(host, port, timeout=60)
        i = 0
        while True:
            k = (c * 5 + i) % len(inputs)
            request_id = f"s{c}-{i}"
            before = not signalled.is_set()
            try:
                status, h, data = call(conn, k, request_id, binary=(i % 2 == 1))
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                with lock:
                    outcomes.append((request_id, before, type(e).__name__))
                if signalled.is_set():
                    return  # the server is gone or going: this request was never accepted
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=60)
                continue
            with lock:
                outcomes.append((request_id, before, status))
                if before and signalled.is_set():
                    in_flight_at_signal.append(status)
                if status == 200:
                    got_200[0] += 1
            if status == 200:
                problem = own_answer(k, request_id, status, h, data)
                if problem:
                    with lock:
                        failures.append(problem)
            elif status != 503:
                with lock:
                    failures.append(f"{request_id}: status {status} {data[:200]!r}")
            if h.get("connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=60)
            i += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    while True:  # let the load build up, then signal
        with lock:
            if got_200[0] >= 40:
                break
        time.sleep(0.01)
    signalled.set()
    os.kill(pid, signal.SIGTERM)
    for t in threads:
        t.join(timeout=120)
    lost = [o for o in outcomes if o[1] and not isinstance(o[2], int)]
    if lost:
        failures.append(f"requests sent before SIGTERM without an answer: {lost[:5]}")
    answered_200 = sum(1 for o in outcomes if o[2] == 200)
    if in_flight_at_signal.count(200) == 0:
        failures.append(f"no request in flight at the signal was answered 200 ({in_flight_at_signal}): the drain was not exercised")
    # The server's own count of what it accepted and answered (one log line per request).
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
            time.sleep(0.1)
        except ProcessLookupError:
            break
    logged = [json.loads(l) for l in open(log) if l.startswith("{")]
    logged_200 = sum(1 for l in logged if l["status"] == 200 and l["path"].endswith("/infer") and l["id"].startswith("s"))
    if logged_200 != answered_200:
        failures.append(f"the server answered {logged_200} requests 200, the clients got {answered_200}")
    bad = [l for l in logged if l["status"] not in (200, 503)]
    if bad:
        failures.append(f"statuses other than 200/503 while draining: {bad[:3]}")
    print(f"sigterm: {len(outcomes)} requests, {answered_200} answered 200 ({in_flight_at_signal.count(200)} of them in "
          f"flight at the signal), {sum(1 for o in outcomes if o[2] == 503)} refused 503, "
          f"{sum(1 for o in outcomes if not isinstance(o[2], int))} connection errors after the signal")
elif mode == "hostile":
    import socket
    pid, budget_mb = int(sys.argv[3]), int(sys.argv[4])
    # The 90th percentile under load against the idle median. On 2 busy cores: idle medians 0.2-0.6 ms; under this
    # load p90 4-5 ms (x10-27) when bodies are parsed off the I/O threads, 512 ms (x1600) when an I/O thread parses
    # them (the review's 2.8 s). A median would hide it: most probes do not land on a parse.
    ratio_bound = 100.0

    def vm(field):
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def probe(conn, method, path, body=None, headers=None):
        t0 = time.perf_counter()
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        dt = time.perf_counter() - t0
        if r.status != 200:
            failures.append(f"probe {method} {path}: status {r.status} {data[:200]!r}")
        return dt

    small_body, small_headers = body_for(3, "small", False)

    def probes(conn, n):
        health, infer = [], []
        for _ in range(n):
            health.append(probe(conn, "GET", "/v2/health/live"))
            infer.append(probe(conn, "POST", "/v2/models/emb/infer", small_body, small_headers))
            time.sleep(0.01)
        return health, infer

    def ms(values):
        return "/".join(f"{np.percentile(values, q) * 1e3:.2f}" for q in (50, 90, 100))

    conn = http.client.HTTPConnection(host, port, timeout=60)  # opened before the load: admitted
    probes(conn, 20)  # warm
    idle_health, idle_infer = probes(conn, 60)
    rss_before = vm("VmRSS")

    stop = threading.Event()
    answers = {}  # kind → list of statuses (or error names)

    def record(kind, what):
        with lock:
            answers.setdefault(kind, []).append(what)

    def read_answer(sock):
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError as e:
                return None, type(e).__name__
            if not chunk:
                break
            data += chunk
        if not data.startswith(b"HTTP/1.1 "):
            return None, f"no answer ({len(data)} bytes)"
        status = int(data[9:12])
        body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
        return status, body

    def check_refusal(kind, status, body, allowed):
        if status is None:
            record(kind, body)
            failures.append(f"{kind}: no answer: {body}")
            return
        record(kind, status)
        if status not in allowed:
            failures.append(f"{kind}: status {status} {body[:200]!r}")
        elif status != 200:
            try:
                message = json.loads(body)["error"]
                if "\n" in message or "frame #" in message:
                    failures.append(f"{kind}: a multi-line error {message[:200]!r}")
            except Exception:
                failures.append(f"{kind}: {status} without a JSON error: {body[:200]!r}")

    def trickler():  # a header, one byte every 100 ms: 408 after --request-timeout-ms
        while not stop.is_set():
            s = socket.create_connection((host, port), timeout=30)
            try:
                for c in b"POST /v2/models/emb/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n":
                    s.sendall(bytes([c]))
                    time.sleep(0.1)
            except OSError:
                pass  # the server answered 408 and closed meanwhile
            check_refusal("trickled header", *read_answer(s), allowed=(408, 503))
            s.close()

    # 28 MB of JSON, as in the review (3M 7-digit ids): a long parse, then a 400 (past max_length).
    ids = np.arange(3_000_000) % 9_000_000 + 1_000_000
    big_json = json.dumps({"inputs": [{"name": n, "shape": [1, len(ids)], "datatype": "INT64", "data": ids.tolist()}
                                      for n in ("input_ids",)]}).encode()

    def big_parser():
        while not stop.is_set():
            c = http.client.HTTPConnection(host, port, timeout=120)
            try:
                c.request("POST", "/v2/models/emb/infer", body=big_json)
                r = c.getresponse()
                check_refusal("large JSON body", r.status, r.read(), allowed=(400, 503))
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                record("large JSON body", type(e).__name__)
                failures.append(f"large JSON body: {type(e).__name__}: {e}")
            c.close()

    holder_body = b"x" * (59 << 20)

    def holder():  # 60 MB declared, 59 MB sent, then held: the budget admits only a few
        while not stop.is_set():
            s = socket.create_connection((host, port), timeout=60)
            try:
                s.sendall(b"POST /v2/models/emb/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (60 << 20))
                s.sendall(holder_body)
            except OSError as e:
                record("held 60 MB body", type(e).__name__)
                failures.append(f"held 60 MB body: the server reset the connection ({e}) instead of answering")
                s.close()
                continue
            check_refusal("held 60 MB body", *read_answer(s), allowed=(408, 503))
            s.close()
            stop.wait(0.2)  # a pause between attempts: this is a bound check, not a CPU race on 2 cores

    def crowd():  # more idle connections than --max-connections: the extra ones get 503 at once
        socks = []
        while not stop.is_set() and len(socks) < 48:
            socks.append(socket.create_connection((host, port), timeout=30))
        for s in socks:
            s.settimeout(0.05)
            try:
                head = s.recv(12)
            except OSError:
                continue
            if head:
                record("over --max-connections", int(head[9:12]))
        stop.wait()
        for s in socks:
            s.close()

    threads = [threading.Thread(target=f) for f in [trickler] * 4 + [big_parser] * 2 + [holder] * 6 + [crowd]]
    for t in threads:
        t.start()
    time.sleep(1.0)  # let the load build up
    load_health, load_infer = probes(conn, 60)
    rss_peak = vm("VmHWM")
    stop.set()
    for t in threads:
        t.join(timeout=120)
    conn.close()
    growth_mb = (rss_peak - rss_before) / 2**20
    # --max-buffered-bytes bounds the request bytes held; parsing one JSON body (one parse thread) adds ~48 B a value
    # (its DOM node, the flattened pointer, the bytes, the tensor and its INT64 copy): 80 B a value allowed.
    memory_bound_mb = budget_mb + 80 * len(ids) / 2**20
    health_ratio = np.percentile(load_health, 90) / np.median(idle_health)
    infer_ratio = np.percentile(load_infer, 90) / np.median(idle_infer)
    print(f"hostile: health p50/p90/max idle {ms(idle_health)} ms, under load {ms(load_health)} ms (p90 x{health_ratio:.1f} "
          f"the idle p50, bound x{ratio_bound:g}); small infer idle {ms(idle_infer)} ms, under load {ms(load_infer)} ms "
          f"(x{infer_ratio:.1f}); peak RSS +{growth_mb:.0f} MB (bound {memory_bound_mb:.0f} MB: --max-buffered-bytes "
          f"{budget_mb} MB + 80 B x {len(ids) / 1e6:g}M values parsed from a {len(big_json) / 2**20:.0f} MB JSON body); "
          f"answers " +
          ", ".join(f"{k}: {dict((v, a.count(v)) for v in sorted(set(a), key=str))}" for k, a in sorted(answers.items())))
    if health_ratio > ratio_bound:
        failures.append(f"health check p90 x{health_ratio:.1f} its idle median under load")
    if infer_ratio > ratio_bound:
        failures.append(f"small infer p90 x{infer_ratio:.1f} its idle median under load")
    if growth_mb > memory_bound_mb:
        failures.append(f"peak RSS grew by {growth_mb:.0f} MB, bound {memory_bound_mb:.0f} MB")
    for kind, expected in (("trickled header", 408), ("held 60 MB body", 503), ("over --max-connections", 503)):
        if expected not in answers.get(kind, []):
            failures.append(f"{kind}: never answered {expected}: {answers.get(kind)}")
else:
    sys.exit(f"unknown mode {mode}")

for f in failures[:20]:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
