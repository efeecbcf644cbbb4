#!/usr/bin/env bash
# Hostile inputs, as a user meets them: every case below is generated here (recipes, shards, JSON/CSV
# lists, model and tokenizer files, CLI arguments, run directories) and must end with exit code 1 and
# exactly ONE stderr line that names the input (or exit 0 with the bad sample counted), within a time
# bound (timeout) and a memory bound (ulimit -v), without changing any output of an earlier run.
# docs/bad-input.md says what each command does with each kind of bad input.
# Usage: hostile_test.sh HOTPATH PYTHON
set -uo pipefail
hp=$(realpath "$1")
py=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
cases=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

kTimeout=${HOSTILE_TIMEOUT:-30}  # seconds per case: a hang fails, it does not stall CI
kMemKiB=${HOSTILE_MEM_KIB:-6000000}  # ulimit -v: LibTorch maps ~2 GB of address space at start

# run_bounded OUT ERR ARGS...: hotpath under the time and memory bound; prints its exit code.
run_bounded() {
  local out=$1 err=$2
  shift 2
  (ulimit -v "$kMemKiB"; exec timeout -k 5 "$kTimeout" "$hp" "$@") >"$out" 2>"$err" </dev/null
  echo $?
}

# bad NAME PATTERN ARGS...: exit 1, one stderr line "hotpath: error: ..." containing PATTERN (fixed string).
bad() {
  local name=$1 pattern=$2
  shift 2
  cases=$((cases + 1))
  local rc
  rc=$(run_bounded out.txt err.txt "$@")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then fail "$name: timed out after ${kTimeout}s"; return; fi
  [ "$rc" -eq 1 ] || { fail "$name: exit code $rc, expected 1: $(head -c 400 err.txt)"; return; }
  [ "$(wc -l <err.txt)" -eq 1 ] || { fail "$name: expected one stderr line, got: $(head -c 600 err.txt)"; return; }
  grep -q "^hotpath: error: " err.txt || fail "$name: not an error line: $(cat err.txt)"
  grep -qF -- "$pattern" err.txt || fail "$name: stderr lacks '$pattern': $(cat err.txt)"
}

# skipped NAME PATTERN ARGS...: exit 0 and PATTERN (the counted skip) on stdout or stderr.
skipped() {
  local name=$1 pattern=$2
  shift 2
  cases=$((cases + 1))
  local rc
  rc=$(run_bounded out.txt err.txt "$@")
  [ "$rc" -eq 0 ] || { fail "$name: exit code $rc, expected 0: $(head -c 400 err.txt)"; return; }
  grep -qF -- "$pattern" out.txt err.txt || fail "$name: output lacks '$pattern': $(head -c 400 out.txt err.txt)"
}

"$py" "$here/make_fixtures.py" "$work" || { echo "cannot make fixtures" >&2; exit 1; }
mkfifo fifo
mkdir adir

# ---- an earlier run whose outputs must not change -------------------------------------------------
recipe() {  # recipe FILE OUTPUT_DIR [extra YAML lines]
  local file=$1 dir=$2
  shift 2
  {
    echo "name: hostile"
    echo "output_dir: $dir"
    echo "model: {name: cnn_small, num_classes: 2}"
    echo "data:"
    echo "  train: $work/good-{000000..000001}.tar"
    echo "  eval: $work/good-000000.tar"
    echo "  image_size: 8"
    echo "  channels: 1"
    echo "  train_crop: resize"
    echo "  eval_crop: resize"
    echo "  resize_shorter: 8"
    echo "  mean: [0.5]"
    echo "  std: [0.25]"
    echo "  workers: 1"
    echo "train: {epochs: 1, batch_size: 8, threads: 1, log_every: 1}"
    echo "optimizer: {name: sgd, lr: 0.05}"
    echo "schedule: {name: constant}"
    for line in "$@"; do echo "$line"; done
  } >"$file"
}
recipe base.yaml "$work/run"
"$hp" train base.yaml --quiet >/dev/null 2>train.err || { echo "the reference run failed: $(cat train.err)" >&2; exit 1; }
"$hp" data pack good.csv -o "$work/packed/p" >/dev/null 2>&1 || true  # (made below once the CSV exists)
printf 'path,label\nimg/0.png,0\nimg/1.png,1\nimg/2.png,0\nimg/3.png,1\n' >good.csv
mkdir -p packed
"$hp" data pack good.csv -o "$work/packed/p" >/dev/null 2>pack.err || { echo "reference pack failed: $(cat pack.err)" >&2; exit 1; }
snapshot() { (cd "$work" && find run packed -type f ! -name .lock -print0 | sort -z | xargs -0 sha256sum); }
snapshot >before.sha

# ---- recipes: special files, size, YAML structure ----------------------------------------------------
bad recipe-fifo "fifo: is a FIFO" train fifo
bad recipe-dev-zero "/dev/zero: is a character device" train /dev/zero
bad recipe-directory "adir" train adir
bad recipe-missing "nothere.yaml" train nothere.yaml
ln -s loop1 loop2 && ln -s loop2 loop1
bad recipe-symlink-loop "loop1" train loop1
head -c $((17 * 1024 * 1024)) /dev/zero | tr '\0' '#' >huge.yaml
bad recipe-too-large "huge.yaml: recipe of" train huge.yaml
printf 'name: a\nname: b\n' >dup.yaml
bad yaml-duplicate-key "dup.yaml:2" train dup.yaml
printf 'train:\n  epochs: 1\n  epochs: 5\n' >dup2.yaml
bad yaml-duplicate-nested-key "dup2.yaml:3" train dup2.yaml
printf 'name: a\n---\nname: b\n' >docs.yaml
bad yaml-second-document "docs.yaml:3" train docs.yaml
printf 'name: "unterminated\n' >quote.yaml
bad yaml-unclosed-double-quote "quote.yaml:1" train quote.yaml
printf "name: 'unterminated\n" >squote.yaml
bad yaml-unclosed-single-quote "squote.yaml" train squote.yaml
printf 'model: [unclosed\n' >flow.yaml
bad yaml-unclosed-flow "flow.yaml" train flow.yaml
printf 'model:\n\tname: x\n' >tab.yaml
bad yaml-tab-indent "tab.yaml" train tab.yaml
"$py" -c "print('a: ' + '[' * 20000 + ']' * 20000)" >deep.yaml
bad yaml-deep-nesting "deep.yaml" train deep.yaml
head -c 3000 /dev/urandom >binary.yaml
bad yaml-binary "binary.yaml" train binary.yaml
printf -- '- a\n- b\n' >list.yaml
bad yaml-not-a-mapping "list.yaml" train list.yaml
printf 'modle: {}\n' >typo.yaml
bad yaml-unknown-section "unknown key 'modle'" train typo.yaml
printf '&a [*a]\n' >alias.yaml
bad yaml-self-alias "alias.yaml" train alias.yaml

# ---- recipes: every bounded number -----------------------------------------------------------------
# key=value pairs that must be refused naming the key.
while read -r key value; do
  bad "recipe-$key=$value" "$key" train base.yaml --set "output_dir=$work/never" --set "$key=$value"
done <<'CASES'
train.threads 100000
train.threads -1
train.threads 1e6
train.epochs 0
train.epochs 99999999999999999999
train.epochs 1e19
train.epochs 2.5
train.epochs abc
train.epochs [1]
train.batch_size 0
train.batch_size 1099511627776
train.batch_size -8
train.accum_steps 3
train.accum_steps 0
train.log_every 0
train.eval_every -1
train.max_steps -5
train.max_steps 9223372036854775807
train.scaler_growth_interval 0
train.label_smoothing 1
train.label_smoothing .nan
train.ema_decay 1.5
train.clip_grad_norm -1
train.scaler_init_scale .inf
train.seed -1
model.num_classes 0
model.num_classes 16777215
model.num_classes -3
model.lora_r -1
model.lora_dropout 1
data.image_size 4
data.image_size 100000
data.channels 2
data.workers 0
data.workers 100000
data.prefetch 0
data.prefetch 1000
data.shuffle_buffer 0
data.shuffle_buffer 1e12
data.max_bad_samples -2
data.flip 2
data.translate -1
data.resize_shorter 4
data.mean [.nan]
data.std [0]
data.scale_min 0
data.max_length 1
data.pad_to_multiple_of -1
optimizer.lr 0
optimizer.lr -1
optimizer.lr .inf
optimizer.lr 1e31
optimizer.name lbfgs
schedule.step_epochs 1e19
schedule.step_epochs 0
schedule.warmup_epochs -1
schedule.warmup_epochs 1e300
schedule.name cosine_typo
checkpoint.keep_last 0
checkpoint.every_steps -1
checkpoint.every_epochs 99999999999
checkpoint.metric f1
train.precision fp8
train.device tpu
CASES

# ---- CLI arguments ------------------------------------------------------------------------------------
bad cli-unknown-flag "--bogus" train base.yaml --bogus
bad cli-no-subcommand "subcommand" 
bad cli-unknown-subcommand "subcommand is required" frobnicate
bad cli-missing-value "--set" train base.yaml --set
bad cli-bad-set "expected key=value" train base.yaml --set novalue
bad cli-set-unknown-key "unknown key 'train.epochz'" train base.yaml --set train.epochz=1
bad cli-resume-and-overwrite "--resume and --overwrite" train base.yaml --resume --overwrite
bad cli-trace-steps "--trace-steps" train base.yaml --trace-steps 0
bad cli-eval-threads "--threads" eval --model-dir run good-000000.tar --threads 100000
bad cli-eval-batch "--batch-size" eval --model-dir run good-000000.tar --batch-size 0
bad cli-predict-threads "--threads" predict --model-dir run img/0.png --threads -1
bad cli-embed-threads "--threads" embed --model adir --threads 99999
bad cli-tokenize-threads "--threads" tokenize --tokenizer adir --threads 100000
bad cli-inspect-num-classes "--num-classes" data inspect good-000000.tar --num-classes -1
bad cli-inspect-num-classes-huge "--num-classes" data inspect good-000000.tar --num-classes 99999999999
bad cli-pack-text-threads "--threads" data pack-text good.csv -o x --threads 1000000
bad cli-integer-garbage "--batch-size" eval --model-dir run good-000000.tar --batch-size 12abc
bad cli-overflow "--batch-size" eval --model-dir run good-000000.tar --batch-size 99999999999999999999

# ---- shards -----------------------------------------------------------------------------------------
bad shard-fifo "fifo: is a FIFO" data inspect fifo
bad shard-directory "adir" data inspect adir
bad shard-dev-zero "/dev/zero" data inspect /dev/zero
bad shard-missing "none-000000.tar" data inspect none-000000.tar
bad train-shard-fifo "fifo" train base.yaml --set "output_dir=$work/never" --set "data.train=$work/fifo"
bad train-shard-dir "adir" train base.yaml --set "output_dir=$work/never" --set "data.train=$work/adir"
bad train-eval-shard-fifo "fifo" train base.yaml --set "output_dir=$work/never" --set "data.eval=$work/fifo"
bad train-eval-shard-missing "data.eval" train base.yaml --set "output_dir=$work/never" --set "data.eval=$work/none-000000.tar"
bad train-eval-shard-garbage "data.eval holds no usable sample" train base.yaml --set "output_dir=$work/never" --set "data.eval=$work/garbage-000000.tar"
bad train-all-labels-bad "usable samples" train base.yaml --set "output_dir=$work/never" --set "data.train=$work/allbad-000000.tar"
bad train-garbage-shard "usable samples" train base.yaml --set "output_dir=$work/never" --set "data.train=$work/garbage-000000.tar"
bad train-empty-shard "usable samples" train base.yaml --set "output_dir=$work/never" --set "data.train=$work/empty-000000.tar"
skipped inspect-truncated "bad" data inspect trunc-000000.tar
# Labels are sample data: outside [0, num_classes) (-100 included) a bad sample, named and counted.
for f in label7 labelneg label100 label2p31 labelhuge labeltext labelempty labelfloat; do
  skipped "inspect-$f" "1 bad" data inspect "$f-000000.tar" --num-classes 2
done
skipped inspect-label-7-named "label 7 outside [0, 2)" data inspect label7-000000.tar --num-classes 2
skipped inspect-label-minus-100-named "label -100 outside [0, 2)" data inspect label100-000000.tar --num-classes 2
skipped inspect-label-negative-no-num-classes "label -1 outside" data inspect labelneg-000000.tar
for f in label7 labelneg label100 label2p31; do
  # Within the budget: trained on the good samples, the bad one skipped and counted in profile.json.
  recipe "r-$f.yaml" "$work/ok-$f" "  # label case"
  sed -i "s|train: $work/good-{000000..000001}.tar|train: $work/$f-000000.tar|" "r-$f.yaml"
  cases=$((cases + 1))
  rc=$(run_bounded out.txt err.txt train "r-$f.yaml" --quiet)
  [ "$rc" -eq 0 ] || fail "train-$f: exit $rc, expected 0 (bad label skipped): $(head -c 400 err.txt)"
  grep -q '"train": *1' "ok-$f/profile.json" 2>/dev/null || fail "train-$f: profile.json does not count 1 bad train sample: $(cat "ok-$f/profile.json" 2>/dev/null | head -c 300)"
  # Over the budget (max_bad_samples 0): one line naming shard, offset, member and the label.
  bad "train-$f-over-budget" "$f-000000.tar:11264:000005.cls: label" train "r-$f.yaml" --quiet --set "output_dir=$work/never-$f" --set data.max_bad_samples=0
done

# ---- image lists for `data pack` ----------------------------------------------------------------------
jsonl() { printf '%s\n' "$@" >"$name.jsonl"; }
name=deep; "$py" -c "print('{\"path\": \"img/0.png\", \"label\": 0, \"x\": ' + '[' * 100000 + ']' * 100000 + '}')" >deep.jsonl
bad pack-jsonl-deep "deep.jsonl:1: JSON nested deeper" data pack deep.jsonl -o "$work/out/p1"
name=notobj; jsonl '[1,2]'
bad pack-jsonl-not-object "notobj.jsonl:1" data pack notobj.jsonl -o "$work/out/p2"
name=trunc; jsonl '{"path": "img/0.png", "lab'
bad pack-jsonl-truncated "trunc.jsonl:1" data pack trunc.jsonl -o "$work/out/p3"
name=badutf; printf '{"path": "img/0.png", "label": "\xff\xfe"}\n' >badutf.jsonl
bad pack-jsonl-invalid-utf8 "badutf.jsonl:1" data pack badutf.jsonl -o "$work/out/p4"
name=hugelabel; jsonl '{"path": "img/0.png", "label": 16777215}' '{"path": "img/1.png", "label": 0}'
bad pack-jsonl-huge-label "hugelabel.jsonl: label 16777215" data pack hugelabel.jsonl -o "$work/out/p5"
name=u64label; jsonl '{"path": "img/0.png", "label": 18446744073709551615}'
bad pack-jsonl-u64-label "u64label.jsonl" data pack u64label.jsonl -o "$work/out/p6"
name=floatlabel; jsonl '{"path": "img/0.png", "label": 1.5}'
bad pack-jsonl-float-label "floatlabel.jsonl:1" data pack floatlabel.jsonl -o "$work/out/p7"
name=neglabel; jsonl '{"path": "img/0.png", "label": -1}'
bad pack-jsonl-negative-label "neglabel.jsonl:1" data pack neglabel.jsonl -o "$work/out/p8"
name=nulllabel; jsonl '{"path": "img/0.png", "label": null}'
bad pack-jsonl-null-label "nulllabel.jsonl:1" data pack nulllabel.jsonl -o "$work/out/p9"
name=nopath; jsonl '{"label": 0}'
bad pack-jsonl-no-path "nopath.jsonl:1" data pack nopath.jsonl -o "$work/out/p10"
name=nlclass; jsonl '{"path": "img/0.png", "label": "a\nb"}'
bad pack-jsonl-newline-class "nlclass.jsonl:1" data pack nlclass.jsonl -o "$work/out/p11"
"$py" -c "
import json
print(json.dumps({'path': 'img/0.png', 'label': 0, **{f'k{i}': i for i in range(200000)}}))" >wide.jsonl
skipped pack-jsonl-200k-keys "packed 1" data pack wide.jsonl -o "$work/out/p12"
ln -s fifo fifo.jsonl
bad pack-jsonl-fifo "fifo.jsonl: is a FIFO" data pack fifo.jsonl -o "$work/out/p13"
printf 'path,label\nimg/0.png,16777215\nimg/1.png,0\n' >hugelabel.csv
bad pack-csv-huge-label "hugelabel.csv: label 16777215" data pack hugelabel.csv -o "$work/out/c1"
printf 'path,label\nimg/0.png,99999999999999999999\n' >overflow.csv
bad pack-csv-overflow-label "overflow.csv:2" data pack overflow.csv -o "$work/out/c2"
printf 'path,label\nimg/0.png,\xff\xfe\n' >badutf.csv
bad pack-csv-invalid-utf8-label "badutf.csv:2" data pack badutf.csv -o "$work/out/c3"
[ -z "$(ls out/c3* 2>/dev/null)" ] || fail "pack-csv-invalid-utf8-label: left output behind: $(ls out)"
printf 'path,label\nimg/0.png,-1\n' >neg.csv
bad pack-csv-negative-label "neg.csv:2" data pack neg.csv -o "$work/out/c4"
printf 'path,label\n%s,0\nimg/1.png,1\n' "$work/fifo" >fiforow.csv
skipped pack-csv-fifo-row "skipped" data pack fiforow.csv -o "$work/out/c5"
printf 'path,label\n/dev/zero,0\nimg/1.png,1\n' >devrow.csv
skipped pack-csv-dev-zero-row "skipped" data pack devrow.csv -o "$work/out/c6"
printf 'path,label\nadir,0\nimg/1.png,1\n' >dirrow.csv
skipped pack-csv-directory-row "skipped" data pack dirrow.csv -o "$work/out/c7"
printf 'path,label\nimg/0.png\0evil,0\nimg/1.png,1\n' >nulrow.csv
skipped pack-csv-nul-in-path "a path with a NUL byte" data pack nulrow.csv -o "$work/out/c8"
printf 'path,label\n' >headeronly.csv
bad pack-csv-no-rows "headeronly.csv" data pack headeronly.csv -o "$work/out/c9"
printf 'path,label\n"img/0.png,0\n' >quote.csv
bad pack-csv-unclosed-quote "quote.csv" data pack quote.csv -o "$work/out/c10"
bad pack-classes-file-fifo "fifo: is a FIFO" data pack good.csv -o "$work/out/c11" --classes-file fifo
bad pack-classes-file-dev-zero "/dev/zero" data pack good.csv -o "$work/out/c12" --classes-file /dev/zero
bad pack-classes-file-dir "adir" data pack good.csv -o "$work/out/c13" --classes-file adir
printf 'a\n\nb\n' >gap.txt
bad pack-classes-file-gap "gap.txt:2" data pack good.csv -o "$work/out/c14" --classes-file gap.txt
bad pack-source-fifo "fifo" data pack fifo -o "$work/out/c15"
ln -s /dev/zero zero.csv
bad pack-source-dev-zero "zero.csv: is a character device" data pack zero.csv -o "$work/out/c16"

# Text lists for `data pack-text`.
printf '{"text": "a", "label": 99999999999999999}\n' >hugelabel_text.jsonl
bad pack-text-huge-label "hugelabel_text.jsonl: label 99999999999999999 is outside" data pack-text hugelabel_text.jsonl --format jsonl -o "$work/out/t1"
"$py" -c "print('{\"text\": \"a\", \"x\": ' + '[' * 100000 + ']' * 100000 + '}')" >deep_text.jsonl
bad pack-text-deep "deep_text.jsonl:1: JSON nested deeper" data pack-text deep_text.jsonl --format jsonl -o "$work/out/t2"
bad pack-text-fifo "fifo: is a FIFO" data pack-text fifo -o "$work/out/t3"
bad pack-text-dev-zero "/dev/zero" data pack-text /dev/zero -o "$work/out/t4"

# ---- model packages (eval / predict --model-dir) ------------------------------------------------------
pkg() {  # pkg NAME: a copy of the reference run's model package to break
  rm -rf "$1" && mkdir "$1" && cp run/model.json run/model.safetensors "$1/"
}
for f in deep deep_obj notobject truncated binary bom_garbage; do
  pkg "pkg-$f" && cp "$f.json" "pkg-$f/model.json"
  bad "model-json-$f" "pkg-$f/model.json" predict --model-dir "pkg-$f" img/0.png
done
pkg pkg-wide && cp wide.json pkg-wide/model.json
bad model-json-200k-keys "pkg-wide/model.json: missing field" predict --model-dir pkg-wide img/0.png
pkg pkg-fifo && rm pkg-fifo/model.json && mkfifo pkg-fifo/model.json
bad model-json-fifo "model.json: is a FIFO" predict --model-dir pkg-fifo img/0.png
pkg pkg-dir && rm pkg-dir/model.json && mkdir pkg-dir/model.json
bad model-json-directory "model.json" predict --model-dir pkg-dir img/0.png
pkg pkg-wfifo && rm pkg-wfifo/model.safetensors && mkfifo pkg-wfifo/model.safetensors
bad weights-fifo "model.safetensors: is a FIFO" predict --model-dir pkg-wfifo img/0.png
pkg pkg-wzero && rm pkg-wzero/model.safetensors && ln -s /dev/zero pkg-wzero/model.safetensors
bad weights-dev-zero "model.safetensors" predict --model-dir pkg-wzero img/0.png
pkg pkg-wtrunc && head -c 100 run/model.safetensors >pkg-wtrunc/model.safetensors
bad weights-truncated "pkg-wtrunc/model.safetensors" predict --model-dir pkg-wtrunc img/0.png
pkg pkg-wdeep && "$py" -c "
import struct, sys
h = b'{\"a\":' + b'[' * 100000 + b']' * 100000 + b'}'
sys.stdout.buffer.write(struct.pack('<Q', len(h)) + h)" >pkg-wdeep/model.safetensors
bad weights-header-deep "pkg-wdeep/model.safetensors" predict --model-dir pkg-wdeep img/0.png
pkg pkg-wmany && "$py" -c "
import json, struct, sys
h = json.dumps({f't{i}': {'dtype': 'F32', 'shape': [1], 'data_offsets': [4 * i, 4 * i + 4]} for i in range(100000)}).encode()
sys.stdout.buffer.write(struct.pack('<Q', len(h)) + h + bytes(400000))" >pkg-wmany/model.safetensors
bad weights-header-100k-entries "pkg-wmany/model.safetensors" predict --model-dir pkg-wmany img/0.png
pkg pkg-wdup && "$py" -c "
import struct, sys
h = b'{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}'
sys.stdout.buffer.write(struct.pack('<Q', len(h)) + h + bytes(4))" >pkg-wdup/model.safetensors
bad weights-header-duplicate "duplicate key" predict --model-dir pkg-wdup img/0.png
while read -r field value pattern; do
  pkg "pkg-$field-$value"
  "$py" - "pkg-$field-$value/model.json" "$field" "$value" <<'PY'
import json, sys
path, field, value = sys.argv[1:]
j = json.load(open(path))
j[field] = json.loads(value)
open(path, "w").write(json.dumps(j))
PY
  bad "model-json-$field=$value" "$pattern" predict --model-dir "pkg-$field-$value" img/0.png
done <<'CASES'
num_classes 1000000000000 num_classes
num_classes 18446744073709551615 num_classes
num_classes -1 num_classes
num_classes 2.5 num_classes
num_classes "2" num_classes
num_classes 0 num_classes
model "resnet9000" resnet9000
model 7 model
class_names ["a"] class_names
image_size 0 model.json
image_size 100000000 model.json
in_channels 5 model.json
mean [1,2,3,4] model.json
CASES

# ---- exported packages (config.json + model.safetensors + preprocess.json; issue 28) -----------------
# Every value the engine divides by or indexes with is checked when the package loads: predict, eval, embed
# and serve end with one line naming the file, node and attribute, never SIGFPE or a oneDNN message.
xpkg_ok=1
"$hp" export --model-dir run --out xpkg >/dev/null 2>&1 || { fail "export of the reference run failed"; xpkg_ok=0; }
xpkg() {  # xpkg NAME PYTHON: a copy of the exported package, edited by PYTHON (d = the copy's path)
  rm -rf "$1" && cp -r xpkg "$1"
  "$py" - "$1" <<PY
import json, struct, sys
d = sys.argv[1]
def edit(name, fn):
    j = json.load(open(f"{d}/{name}"))
    fn(j)
    open(f"{d}/{name}", "w").write(json.dumps(j))
def first(j, op):
    return next(n for n in j["graph"]["nodes"] if n["op"] == op)
$2
PY
}
if [ "$xpkg_ok" -eq 1 ]; then
  xpkg xpkg-stride 'edit("config.json", lambda j: first(j, "conv2d")["attrs"].update(stride=[0, 0]))'
  bad package-conv-stride-0-predict "attribute 'stride' is [0, 0]" predict --model-dir xpkg-stride img/0.png
  bad package-conv-stride-0-eval "xpkg-stride/config.json: graph: node" eval --model-dir xpkg-stride good-000000.tar
  bad package-conv-stride-0-serve "attribute 'stride' is [0, 0]" serve xpkg-stride --port 0
  xpkg xpkg-groups 'edit("config.json", lambda j: first(j, "conv2d")["attrs"].update(groups=0))'
  bad package-conv-groups-0 "attribute 'groups' is 0" predict --model-dir xpkg-groups img/0.png
  xpkg xpkg-pad 'edit("config.json", lambda j: first(j, "conv2d")["attrs"].update(padding=[-1, 0, 0, 0]))'
  bad package-conv-padding-negative "attribute 'padding' is [-1, 0, 0, 0]" predict --model-dir xpkg-pad img/0.png
  xpkg xpkg-nan '
raw = open(f"{d}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
name, t = next((k, v) for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")
at = 8 + n + t["data_offsets"][0]
open(f"{d}/model.safetensors", "wb").write(raw[:at] + struct.pack("<f", float("nan")) + raw[at + 4:])'
  bad package-nan-weights "model.safetensors: tensor" predict --model-dir xpkg-nan img/0.png
  xpkg xpkg-std 'edit("preprocess.json", lambda j: j.update(std=[1e-40]))'
  bad package-std-1e-40 "preprocess.json: field 'std' value 0 is 1e-40" predict --model-dir xpkg-std img/0.png
  xpkg xpkg-int8 'edit("config.json", lambda j: j.update(precision="int8"))'
  bad package-int8-claim-fp32-weights "config.json: precision is int8 but 0 nodes are quantized" \
    predict --model-dir xpkg-int8 img/0.png
  rm -rf xpkg-broken && cp -r xpkg xpkg-broken && cp truncated.json xpkg-broken/config.json
  bad package-config-truncated "xpkg-broken/config.json" predict --model-dir xpkg-broken img/0.png
  grep -q "model.json" err.txt && fail "package-config-truncated: names model.json: $(cat err.txt)"
fi
# A text package: attention heads of 0 used to crash serve inside the check meant to catch it.
mkdir -p bert-ok && printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n' >bert-ok/vocab.txt && "$py" -c '
import json
json.dump({"model_type": "bert", "vocab_size": 6, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
           "intermediate_size": 16, "max_position_embeddings": 16}, open("bert-ok/config.json", "w"))'
if "$hp" export --config bert-ok/config.json --random-init --task embed --out tpkg >/dev/null 2>&1; then
  rm -rf tpkg-heads && cp -r tpkg tpkg-heads && "$py" -c '
import json
j = json.load(open("tpkg-heads/config.json"))
next(n for n in j["graph"]["nodes"] if n["op"] == "attention")["attrs"]["heads"] = 0
json.dump(j, open("tpkg-heads/config.json", "w"))'
  bad package-attention-heads-0-embed "attribute 'heads' is 0" embed --model tpkg-heads --input good.csv
  bad package-attention-heads-0-serve "attribute 'heads' is 0" serve tpkg-heads --port 0
  # serve's limits either work or are refused (issue 28): a budget no request fits in is refused at start.
  bad serve-buffered-bytes-below-one-request "--max-buffered-bytes 1000 is less than one request's budget" \
    serve tpkg --port 0 --max-buffered-bytes 1000
  bad serve-header-bytes-tiny "--max-header-bytes" serve tpkg --port 0 --max-header-bytes 10
  bad serve-connections-0 "--max-connections" serve tpkg --port 0 --max-connections 0
  bad serve-parse-threads-0 "--parse-threads" serve tpkg --port 0 --parse-threads 0
else
  fail "export of a random-init BERT embedder failed"
fi
bad predict-image-fifo "fifo: is a FIFO" predict --model-dir run fifo
bad predict-image-dev-zero "/dev/zero" predict --model-dir run /dev/zero
bad predict-image-directory "adir" predict --model-dir run adir
bad predict-image-garbage "binary.json" predict --model-dir run binary.json
bad predict-image-missing "nothere.png" predict --model-dir run nothere.png
bad eval-shard-fifo "fifo" eval --model-dir run fifo
bad eval-model-dir-missing "nodir: not a directory" eval --model-dir nodir good-000000.tar
skipped eval-label-out-of-range "top-1" eval --model-dir run label7-000000.tar

# ---- tokenizer and text-model files ---------------------------------------------------------------------
mkdir -p tok-ok && printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n' >tok-ok/vocab.txt
bad tokenize-max-length-huge "--max-length" tokenize --tokenizer tok-ok --input good.csv --max-length 4000000000 --padding max_length
bad tokenize-pad-multiple-huge "--pad-to-multiple-of" tokenize --tokenizer tok-ok --input good.csv --pad-to-multiple-of 4294967295 --padding longest
bad tokenize-pad-length-huge "--pad-length" tokenize --tokenizer tok-ok --input good.csv --pad-length 99999999999 --padding max_length
bad embed-max-length-huge "--max-length" embed --model adir --input good.csv --max-length 4000000000
for f in deep deep_obj notobject truncated binary; do
  mkdir -p "tok-$f" && cp "$f.json" "tok-$f/tokenizer.json"
  bad "tokenizer-json-$f" "tok-$f/tokenizer.json" tokenize --tokenizer "tok-$f" --input good.csv
done
mkdir -p tok-wide && cp wide.json tok-wide/tokenizer.json
bad tokenizer-json-200k-keys "tok-wide/tokenizer.json" tokenize --tokenizer tok-wide --input good.csv
mkdir -p tok-fifo && mkfifo tok-fifo/tokenizer.json
bad tokenizer-json-fifo "tokenizer.json: is a FIFO" tokenize --tokenizer tok-fifo --input good.csv
mkdir -p tok-vfifo && mkfifo tok-vfifo/vocab.txt
bad tokenizer-vocab-fifo "vocab.txt: is a FIFO" tokenize --tokenizer tok-vfifo --input good.csv
mkdir -p tok-vdir/vocab.txt
bad tokenizer-vocab-directory "vocab.txt" tokenize --tokenizer tok-vdir --input good.csv
bad tokenize-input-fifo "fifo: is a FIFO" tokenize --tokenizer tok-ok --input fifo
bad tokenize-input-dev-zero "/dev/zero" tokenize --tokenizer tok-ok --input /dev/zero
bad tokenize-input-directory "adir" tokenize --tokenizer tok-ok --input adir
for f in deep wide notobject truncated; do
  mkdir -p "bert-$f" && cp "$f.json" "bert-$f/config.json"
  cp tok-ok/vocab.txt "bert-$f/"
  bad "text-config-json-$f" "bert-$f/config.json" embed --model "bert-$f" --input good.csv
done
while read -r field value; do
  mkdir -p "cfg-$field-$value"
  "$py" - "cfg-$field-$value/config.json" "$field" "$value" <<'PY'
import json, sys
path, field, value = sys.argv[1:]
j = {"model_type": "bert", "vocab_size": 6, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
     "intermediate_size": 16, "max_position_embeddings": 16}
j[field] = json.loads(value)
open(path, "w").write(json.dumps(j))
PY
  cp tok-ok/vocab.txt "cfg-$field-$value/"
  bad "text-config-$field=$value" "config.json" embed --model "cfg-$field-$value" --input good.csv
done <<'CASES'
num_hidden_layers 100000
hidden_size 10000000
num_attention_heads 3
vocab_size 0
vocab_size 99999999999
intermediate_size -1
max_position_embeddings 1e30
model_type "gpt2"
layer_norm_eps -1
CASES

# ---- run directories ---------------------------------------------------------------------------------
# Another run in the directory: refused unless --resume or --overwrite.
bad run-dir-holds-another-run "holds another run" train base.yaml
recipe other.yaml "$work/run" "checkpoint: {keep_last: 1}"
bad run-dir-other-recipe "$work/run: holds another run" train other.yaml
# The lock: a second train on a locked directory is refused at once.
mkdir -p locked && recipe locked.yaml "$work/locked"
exec 9>locked/.lock
flock -n 9 || fail "cannot take the test lock"
bad run-dir-locked "another \`hotpath train\`" train locked.yaml
bad run-dir-locked-resume "another \`hotpath train\`" train locked.yaml --resume
exec 9>&-
# --overwrite clears, then trains.
cp -r run run-ow && sed "s|$work/run|$work/run-ow|" base.yaml >ow.yaml
cases=$((cases + 1))
rc=$(run_bounded out.txt err.txt train ow.yaml --overwrite --quiet)
[ "$rc" -eq 0 ] || fail "run-dir-overwrite: exit $rc: $(head -c 300 err.txt)"
[ "$(grep -c '"split":"train"' run-ow/metrics.jsonl)" -eq "$(grep -c '"split":"train"' run/metrics.jsonl)" ] ||
  fail "run-dir-overwrite: metrics.jsonl mixes runs"
# Stray and malformed checkpoint names: reported, never trusted or pruned into.
cprun() { rm -rf "$1" && cp -r run "$1" && sed "s|$work/run\$|$work/$1|" base.yaml >"$1.yaml"; }
cprun stray && mkdir stray/checkpoints/step-99999999999999999999
bad checkpoint-name-overflow "step-99999999999999999999: not a checkpoint name" train stray.yaml --resume
cprun stray2 && mkdir stray2/checkpoints/step-12abc
bad checkpoint-name-garbage "step-12abc" train stray2.yaml --resume
cprun stray3 && mkdir stray3/checkpoints/step--5
bad checkpoint-name-negative "step--5" train stray3.yaml --resume
cprun stray4 && touch stray4/checkpoints/step-00000099
bad checkpoint-name-file "step-00000099" train stray4.yaml --resume
cprun empty-ck && rm -rf empty-ck/checkpoints/*
bad resume-no-checkpoint "no checkpoint to resume from" train empty-ck.yaml --resume
# trainer.json edited or foreign: named file and field.
tj() {  # tj NAME PYTHON-EXPR-ON-j
  cprun "$1"
  local ck
  ck=$(ls -d "$1"/checkpoints/step-* | tail -n 1)
  "$py" - "$ck/trainer.json" "$2" <<'PY'
import json, sys
path, expr = sys.argv[1:]
j = json.load(open(path))
exec(expr)
open(path, "w").write(json.dumps(j))
PY
}
tj tj-step-overflow "j['step'] = 2**63 + 5"; bad trainer-json-step-overflow "trainer.json: step" train tj-step-overflow.yaml --resume --set train.epochs=3
tj tj-step-float "j['step'] = 1e30"; bad trainer-json-step-float "trainer.json: step" train tj-step-float.yaml --resume --set train.epochs=3
tj tj-step-neg "j['step'] = -1"; bad trainer-json-step-negative "trainer.json: step" train tj-step-neg.yaml --resume --set train.epochs=3
tj tj-epoch "j['epoch'] = 10**12"; bad trainer-json-epoch-out-of-range "trainer.json" train tj-epoch.yaml --resume --set train.epochs=3
tj tj-batch "j['batch'] = 10**9"; bad trainer-json-batch-out-of-range "trainer.json" train tj-batch.yaml --resume --set train.epochs=3
tj tj-format "j['format'] = 99"; bad trainer-json-format "trainer.json: format" train tj-format.yaml --resume --set train.epochs=3
tj tj-kind "j['kind'] = 'text'"; bad trainer-json-kind "trainer.json" train tj-kind.yaml --resume --set train.epochs=3
tj tj-window "j['loss_window'] = 'x'"; bad trainer-json-loss-window-type "trainer.json: loss_window" train tj-window.yaml --resume --set train.epochs=3
tj tj-notobj "j = [1]"; bad trainer-json-not-object "trainer.json" train tj-notobj.yaml --resume --set train.epochs=3
cprun tj-deep && cp deep.json "$(ls -d tj-deep/checkpoints/step-* | tail -n 1)/trainer.json"
bad trainer-json-deep "trainer.json: JSON nested deeper" train tj-deep.yaml --resume --set train.epochs=3
cprun tj-fifo && ck=$(ls -d tj-fifo/checkpoints/step-* | tail -n 1) && rm "$ck/trainer.json" && mkfifo "$ck/trainer.json"
bad trainer-json-fifo "trainer.json: is a FIFO" train tj-fifo.yaml --resume --set train.epochs=3
# Checkpoint state of another optimizer / shape: refused naming the file.
cprun opt-kind
bad resume-other-optimizer "optimizer.safetensors" train opt-kind.yaml --resume --set train.epochs=3 --set optimizer.name=adamw
cprun ck-shape
bad resume-other-model "model.safetensors" train ck-shape.yaml --resume --set train.epochs=3 --set model.name=cnn_medium
cprun ck-wfifo && ck=$(ls -d ck-wfifo/checkpoints/step-* | tail -n 1) && rm "$ck/optimizer.safetensors" && mkfifo "$ck/optimizer.safetensors"
bad resume-optimizer-fifo "optimizer.safetensors: is a FIFO" train ck-wfifo.yaml --resume --set train.epochs=3
cprun finished
bad resume-finished-run "already finished" train finished.yaml --resume

# ---- nothing an earlier run wrote has changed ------------------------------------------------------------
snapshot >after.sha
diff before.sha after.sha >/dev/null || fail "outputs of the earlier run changed: $(diff before.sha after.sha | head -n 5)"
[ -z "$(find never -mindepth 1 ! -name .lock 2>/dev/null)" ] || fail "a refused run wrote into its output directory: $(ls -A never)"

echo "hostile inputs: $cases cases, $failures failures"
[ "$cases" -ge 150 ] || { echo "FAIL: only $cases cases (>= 150 expected)" >&2; exit 1; }
[ "$failures" -eq 0 ]
