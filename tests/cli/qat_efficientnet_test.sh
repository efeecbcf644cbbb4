#!/usr/bin/env bash
# Quantization-aware training against post-training int8 on real photos (issue 27): EfficientNet-Lite0 with its
# real ImageNet weights, exported int8 with EVERY convolution int8 twice — post-training (calibrated on the
# calibration views, no layer kept float) and after QAT (distillation from fp32 on random crops of the QAT photos,
# no labels) — and compared with the fp32 package on views of OTHER photos (photos.sh: the sets share no source
# photo). Passes when the QAT package keeps no conv float, its distillation loss fell, and it agrees with fp32 on
# >= HOTPATH_QAT_MIN_AGREEMENT of the views: default 0.90, a guard under today's 94.7 % (142/150; post-training
# with every conv int8: 92.7 %) — the issue's 99 % is not met (docs/inference-accuracy.md §5 says why). Prints both
# agreements side by side. The QAT export runs the recipe configs/qat_efficientnet_lite0.yaml.
# Usage: qat_efficientnet_test.sh HOTPATH PYTHON [QAT_STEPS]
set -uo pipefail
hp=$1
py=$2
steps=${3:-${HOTPATH_QAT_STEPS:-100}}  # configs/qat_efficientnet_lite0.yaml's
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
make_work_dir
min_agreement=${HOTPATH_QAT_MIN_AGREEMENT:-0.90}

source "$here/photos.sh" "$py"
check_photos
"$py" "$here/views.py" calibration "${calibration_photos[@]}" || die "calibration views"
"$py" "$here/views.py" measured "${measured_photos[@]}" || die "measured views"
"$py" "$here/views.py" qat_images --whole 768 "${qat_photos[@]}" || die "qat images"
for set in calibration qat_images; do
  { echo "path,label"; for f in "$work/$set"/*.jpg; do echo "$f,photo"; done; } > $set.csv
  "$hp" data pack $set.csv -o $set > pack_$set.log 2>&1 || die "data pack $set: $(tail -3 pack_$set.log)"
done

"$hp" export --model efficientnet_lite0 --pretrained --out fp32 > export_fp32.log 2>&1 \
  || die "export fp32: $(tail -3 export_fp32.log)"
# Every conv int8 in both: no output target (--max-output-error 0); --allow-accuracy-loss: the packages are judged
# on the measured photos below, not by the export's own gate on the calibration views.
start=$(date +%s)
"$hp" export --model efficientnet_lite0 --pretrained --out ptq --precision int8 --calibration calibration-000000.tar \
  --max-output-error 0 --allow-accuracy-loss > export_ptq.log 2>&1 || die "export ptq: $(tail -3 export_ptq.log)"
mid=$(date +%s)
"$hp" export --recipe "$here/../../configs/qat_efficientnet_lite0.yaml" --out qat --calibration calibration-000000.tar \
  --qat-data qat_images-000000.tar --qat-steps "$steps" --allow-accuracy-loss > export_qat.log 2>&1 \
  || die "export qat: $(tail -3 export_qat.log)"
end=$(date +%s)
echo "export post-training $((mid - start)) s, QAT ($steps steps) $((end - mid)) s (wall clock)"

views=("$work"/measured/*.jpg)
for pkg in fp32 ptq qat; do
  "$hp" predict --model-dir $pkg --json -k 1 "${views[@]}" > $pkg.jsonl 2> predict_$pkg.err \
    || fail "predict $pkg: $(tail -3 predict_$pkg.err)"
done

"$py" - "$min_agreement" "${#views[@]}" <<'PY' || fail "QAT int8 below the bound or a conv kept float (see above)"
import json, sys
bound, expected = float(sys.argv[1]), int(sys.argv[2])
def top1(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return {r["image"]: r["top"][0]["index"] for r in rows}
fp32 = top1("fp32.jsonl")
assert len(fp32) == expected, (len(fp32), expected)
ok = True
for name in ("ptq", "qat"):
    got = top1(name + ".jsonl")
    report = json.load(open(name + "/quantization_report.json"))
    totals = report["quantization"]["totals"]
    same = sum(fp32[k] == got[k] for k in fp32)
    print("efficientnet_lite0 %s int8: top-1 agreement with fp32 %.2f %% (%d/%d views of %d photos); %d of %d "
          "nodes int8, %d float" % ({"ptq": "post-training", "qat": "QAT"}[name], 100.0 * same / expected, same,
                                   expected, expected // 6, totals["quantized"], totals["candidates"],
                                   totals["kept_float"]))
    if name == "qat":
        q = report["qat"]
        print("  QAT: %d steps, loss %.4f -> %.4f, %.0f s" % (q["steps"], q["loss_first"], q["loss_last"], q["seconds"]))
        ok = totals["kept_float"] == 0 and same / expected >= bound and q["loss_last"] < q["loss_first"]
sys.exit(0 if ok else 1)
PY

finish "QAT (EfficientNet-Lite0, real photos): passed"
