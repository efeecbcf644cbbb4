"""Reference side of hotpath's safetensors tests: python `safetensors` writes, reads and validates.

  safetensors_ref.py write (SPEC.json OUT.safetensors)... # SPEC: {"tensors": [{"name", "dtype", "shape", "hex"}],
                                                       #        "metadata": {...} or null}
  safetensors_ref.py summary FILE [SPEC.json]          # JSON: metadata + per tensor name/dtype/shape/sha256,
                                                       #   with SPEC also "expected": {name: sha256 of its bytes}
  safetensors_ref.py check FILE...                     # JSON: [{"file", "ok", "error"}] from safetensors.deserialize

`write` uses safetensors.numpy.save_file when every dtype exists in numpy, else serialize_file with
TensorSpec (bf16, fp8, fp4 have no numpy dtype). `summary` lists names, dtypes and shapes through
safe_open, takes the bytes from deserialize (any dtype) and, for numpy dtypes, checks get_tensor agrees.
"""
import hashlib
import json
import sys

import numpy as np
import safetensors
from safetensors import TensorSpec, safe_open
from safetensors.numpy import save_file

NUMPY = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
    "I32": np.int32, "U32": np.uint32, "I64": np.int64, "U64": np.uint64,
    "F16": np.float16, "F32": np.float32, "F64": np.float64, "C64": np.complex64,
}
SPEC_NAMES = {  # TensorSpec's dtype strings for the dtypes numpy lacks (F6_* has none at all)
    "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2": "float8_e5m2", "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu",
    "F4": "float4_e2m1fn_x2",
}


def write(spec_path, out_path):
    spec = json.load(open(spec_path, encoding="utf-8"))
    tensors = spec["tensors"]
    metadata = spec.get("metadata")
    if all(t["dtype"] in NUMPY for t in tensors):
        arrays = {t["name"]: np.frombuffer(bytes.fromhex(t["hex"]), NUMPY[t["dtype"]]).reshape(t["shape"])
                  for t in tensors}
        save_file(arrays, out_path, metadata=metadata)
        return
    keep = []  # buffers must outlive serialize_file
    specs = {}
    for t in tensors:
        buf = np.frombuffer(bytes.fromhex(t["hex"]), np.uint8).copy()
        keep.append(buf)
        shape = list(t["shape"])
        if t["dtype"] == "F4":  # TensorSpec takes the packed storage shape and doubles the last dim
            shape[-1] //= 2
        dtype = NUMPY[t["dtype"]]().dtype.name if t["dtype"] in NUMPY else SPEC_NAMES[t["dtype"]]
        specs[t["name"]] = TensorSpec(dtype=dtype, shape=shape, data_ptr=buf.ctypes.data, data_len=buf.nbytes)
    safetensors.serialize_file(specs, out_path, metadata=metadata)


def summary(path, spec_path=None):
    raw = {name: info for name, info in safetensors.deserialize(open(path, "rb").read())}
    out = {"metadata": None, "tensors": []}
    with safe_open(path, framework="numpy") as f:
        out["metadata"] = f.metadata()
        for name in f.keys():
            view = f.get_slice(name)
            data = bytes(raw[name]["data"])
            if view.get_dtype() in NUMPY:
                assert f.get_tensor(name).tobytes() == data, name
            out["tensors"].append({"name": name, "dtype": view.get_dtype(), "shape": list(view.get_shape()),
                                   "sha256": hashlib.sha256(data).hexdigest()})
    if spec_path is not None:
        spec = json.load(open(spec_path, encoding="utf-8"))
        out["expected"] = {t["name"]: hashlib.sha256(bytes.fromhex(t["hex"])).hexdigest() for t in spec["tensors"]}
    print(json.dumps(out))


def check(paths):
    results = []
    for path in paths:
        try:
            safetensors.deserialize(open(path, "rb").read())
            results.append({"file": path, "ok": True, "error": ""})
        except Exception as e:  # noqa: BLE001 — any rejection counts
            results.append({"file": path, "ok": False, "error": str(e)})
    print(json.dumps(results))


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "write":
        for spec_path, out_path in zip(args[0::2], args[1::2], strict=True):
            write(spec_path, out_path)
    elif command == "summary":
        summary(*args)
    elif command == "check":
        check(args)
    else:
        sys.exit(f"unknown command {command!r}")
