#!/usr/bin/env python3
"""Run ONNX files in ONNX Runtime or OpenVINO for hotpath's export parity tests.

    onnx_run.py MANIFEST.json

MANIFEST: {"runtime": "onnxruntime" | "openvino", "check": true, "report_optimized": false,
           "cases": [{"model": "a.onnx", "runs": [{"inputs": "in.safetensors", "outputs": "out.safetensors"}]}]}

Per case: with "check", onnx.checker.check_model(full_check=True) (strict shape inference included) on the
file; then each run feeds the tensors of its inputs file (named as the graph inputs) and writes every
graph output under its name to the outputs file. One JSON line per case on stdout: the model's inputs and
outputs with their dims (ints, or names for dynamic axes), the runtime and its version, the model's op counts
and (ONNX Runtime with "report_optimized") those of the graph ORT runs after its fusions. One python start-up
serves every case: the tests batch them.
"""
import json
import sys

import numpy as np
import onnx
from safetensors.numpy import load_file, save_file


def dims_of(value_info):
    out = []
    for d in value_info.type.tensor_type.shape.dim:
        out.append(d.dim_param if d.dim_param else d.dim_value)
    return out


def ort_runner(path, optimized_path=None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    if optimized_path:
        options.optimized_model_filepath = optimized_path
        options.log_severity_level = 3  # not the warning that the saved graph is specific to this CPU
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    def run(feeds):
        return dict(zip(names, session.run(names, feeds)))

    return run, "onnxruntime " + ort.__version__


def op_histogram(path):
    ops = {}
    for node in onnx.load(path, load_external_data=False).graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return ops


def openvino_runner(path):
    import openvino as ov

    core = ov.Core()
    # fp32 on every CPU: OpenVINO defaults to bf16 where the CPU has it.
    compiled = core.compile_model(core.read_model(path), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1})
    outputs = compiled.outputs

    def run(feeds):
        result = compiled(feeds)
        return {o.get_any_name(): np.asarray(result[o]) for o in outputs}

    return run, "openvino " + ov.__version__


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: onnx_run.py MANIFEST.json")
    with open(sys.argv[1]) as f:
        manifest = json.load(f)
    make_runner = {"onnxruntime": ort_runner, "openvino": openvino_runner}[manifest["runtime"]]
    for case in manifest["cases"]:
        path = case["model"]
        if manifest.get("check", False):
            onnx.checker.check_model(path, full_check=True)
        model = onnx.load(path, load_external_data=False)
        # "optimized": the graph ORT runs after its fusions (Gelu, LayerNormalization, ...), as op counts.
        optimized = path + ".ort_optimized.onnx" if manifest.get("report_optimized") else None
        run, version = make_runner(path, optimized) if optimized else make_runner(path)
        for r in case.get("runs", []):
            outputs = run(load_file(r["inputs"]))
            save_file({k: np.ascontiguousarray(v) for k, v in outputs.items()}, r["outputs"])
        print(json.dumps({
            "model": path,
            "runtime": version,
            "opset": [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")],
            "ir_version": model.ir_version,
            "producer": model.producer_name,
            "inputs": {i.name: dims_of(i) for i in model.graph.input},
            "outputs": {o.name: dims_of(o) for o in model.graph.output},
            "ops": op_histogram(path),
            "optimized_ops": op_histogram(optimized) if optimized else None,
        }), flush=True)


if __name__ == "__main__":
    main()
