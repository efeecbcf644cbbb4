#!/usr/bin/env bash
# ZeRO measurements of docs/benchmarks.md (issue 14), run in an empty directory: ResNet-18 and a BERT-base-shape
# model with AdamW on 2 ranks (torchrun, Gloo on loopback) under train.zero 0 (DDP), 1 and 2, side by side:
# optimizer-state bytes and gradient bytes kept per rank (profile.json's distributed block), bytes handed to
# the collectives per step, step time, and each rank's peak RSS (/usr/bin/time).
# Usage: bench/zero_measure.sh HOTPATH PYTHON
set -euo pipefail
hp=$(realpath "$1"); py=$2; w=$(pwd)
source "$(dirname "$0")/dist_lib.sh"
image_recipe resnet18 16 8 '{name: adamw, lr: 0.0001}' > r18.yaml; text_recipe 4 > bert.yaml
# Each rank under /usr/bin/time: its peak RSS lands in rss-<run>-<rank>.
cat > timed.sh <<SH
#!/usr/bin/env bash
exec /usr/bin/time -f "%M" -o "$w/rss-\$RUN-\$RANK" "$hp" "\$@"
SH
chmod +x timed.sh
for m in r18 bert; do
  for z in 0 1 2; do
    RUN=$m-z$z trun ./timed.sh train $m.yaml --quiet --overwrite --set train.zero=$z --set output_dir=$w/$m-z$z > $m-z$z.log 2>&1
    "$py" - "$w/$m-z$z/profile.json" "$m" "$z" "$w/rss-$m-z$z-0" "$w/rss-$m-z$z-1" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); d = p["distributed"]
rss = [int(open(f).read().split()[-1]) / 1024 for f in sys.argv[4:6]]
mb = lambda b: f"{b / 1e6:.1f} MB"
print(f"{sys.argv[2]} zero={sys.argv[3]}: optimizer state/rank {mb(d['optimizer_state_bytes'])}, "
      f"gradients kept {mb(d.get('gradient_bytes_kept', d['allreduce_bytes_per_step']))}, "
      f"all-reduce {mb(d['allreduce_bytes_per_step'])}/step, all-gather {mb(d.get('allgather_bytes_per_step', 0))}/step, "
      f"step {p['step_ms']:.0f} ms (optimizer {p['fractions']['optimizer'] * 100:.0f} %, wait {p['fractions']['allreduce_wait'] * 100:.0f} %), "
      f"peak RSS rank 0/1 {rss[0]:.0f}/{rss[1]:.0f} MiB")
PY
  done
done
