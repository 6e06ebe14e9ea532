#!/usr/bin/env bash
# torch through libccl_nccl against torch's own NCCL (issue 31's table).
#
#   bench/torch_nccl_bench.sh OUTDIR [BUILD]
#
# Runs bench/torch_nccl_bench.py under torchrun, one process per GPU (NPROC, default
# every GPU), twice on the same machine: without libccl_nccl (torch's own NCCL) and with
# BUILD/libccl_nccl.so preloaded (CCL_NCCL_ROUTE=$ROUTE, default auto); both with NCCL_NVLS_ENABLE=0, so
# that the NCCL calls of either run are the same NCCL. Each times torch.distributed's six
# collectives, bf16, ordinary tensors, 1K..1G by 4x (SIZES), in CUDA graphs and eagerly.
# Writes to OUTDIR: plain.jsonl and lib.jsonl (a line per collective and size), their
# logs (lib.log ends with every rank's routing summary: where the calls went), and
# table.md and table.csv: per collective and size, NCCL's time, the time through the
# library, their ratio (library/NCCL: below 1 is faster), graph then eager, and whether
# the two runs' results agree. Prints table.md. Each run is bounded (PLAIN_LIMIT_S 75 s,
# LIB_LIMIT_S 95 s): the whole takes under 3 minutes on 2 GPUs; a run cut short keeps the
# sizes it timed, and the table says which are missing. PYTHON: the interpreter with
# torch (python3).
set -u
out=${1:?usage: bench/torch_nccl_bench.sh OUTDIR [BUILD]}
cd "$(dirname "$0")/.." || exit 1
build=$(cd "${2:-build}" && pwd) || exit 1
so=$build/libccl_nccl.so
py=${PYTHON:-python3}
mkdir -p "$out" && out=$(cd "$out" && pwd)
[ -e "$so" ] || { echo "torch_nccl_bench.sh: $so not built (make)" >&2; exit 1; }
gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())') || { echo "torch_nccl_bench.sh: $py has no torch" >&2; exit 1; }
nproc=${NPROC:-$gpus}
[ "$nproc" -ge 2 ] || { echo "torch_nccl_bench.sh: needs 2 GPUs or more ($gpus)" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0 CCL_ALGORITHM_DIR=${CCL_ALGORITHM_DIR:-$PWD/algorithms}
port=$((29600 + RANDOM % 1000))

# run NAME LIMIT [VAR=VALUE...]: one torchrun of the worker, its exit status said.
run() {
    local name=$1 limit=$2
    shift 2
    port=$((port + 1))
    local t0=$SECONDS
    env "$@" timeout -k 10 "$limit" "$py" -m torch.distributed.run --standalone --nproc_per_node="$nproc" \
        --master_port="$port" bench/torch_nccl_bench.py "$out/$name.jsonl" >"$out/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc after $((SECONDS - t0)) s ($(($(wc -l <"$out/$name.jsonl" 2>/dev/null || echo 1) - 1)) points)"
}
run plain "${PLAIN_LIMIT_S:-75}"
run lib "${LIB_LIMIT_S:-95}" LD_PRELOAD="$so" CCL_NCCL_ROUTE="${ROUTE:-auto}" CCL_NCCL_SUMMARY=1

"$py" - "$out" <<'EOF'
import json, math, os, sys
out = sys.argv[1]

def load(name):
    meta, rows = {}, {}
    try:
        for line in open(os.path.join(out, name + ".jsonl")):
            d = json.loads(line)
            if d.get("meta"):
                meta = d
            else:
                rows[(d["coll"], d["bytes"])] = d
    except (OSError, ValueError):
        pass
    return meta, rows

pm, plain = load("plain")
lm, lib = load("lib")
keys = sorted(set(plain) | set(lib), key=lambda k: (["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                       "broadcast", "reduce"].index(k[0]), k[1]))
def us(d, k):
    return d[k] if d and k in d else math.nan
def f(v):
    return "n/a" if math.isnan(v) else f"{v:.2f}"
def ratio(a, b):
    return "n/a" if math.isnan(a) or math.isnan(b) or b <= 0 else f"{a / b:.2f}"
def size(b):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= m and b % m == 0:
            return f"{b // m}{unit}"
    return str(b)

m = pm or lm
md = [f"# torch.distributed through libccl_nccl against torch's NCCL\n",
      f"{m.get('ranks', '?')} ranks, {m.get('device', '?')}, torch {m.get('torch', '?')}, NCCL {m.get('nccl', '?')}, "
      f"NCCL_NVLS_ENABLE=0, bf16, ordinary tensors; us per call (max over ranks, median of {m.get('samples', '?')}); "
      "graph: 10 calls captured and replayed 10 times (3 and 2 above 16M); eager: as many calls back to back. "
      "lib: LD_PRELOAD=libccl_nccl.so, CCL_NCCL_ROUTE=" + os.environ.get("ROUTE", "auto") + "; lib/NCCL below 1 is faster through the library.\n"]
csv = ["collective,bytes,nccl_graph_us,lib_graph_us,graph_ratio,nccl_eager_us,lib_eager_us,eager_ratio,results"]
last = None
for k in keys:
    p, l = plain.get(k), lib.get(k)
    if k[0] != last:
        md.append(f"\n### {k[0]}\n\n| size | NCCL graph | lib graph | lib/NCCL | NCCL eager | lib eager | lib/NCCL | results |")
        md.append("|---:|---:|---:|---:|---:|---:|---:|---|")
        last = k[0]
    res = ("missing in " + ("plain" if not p else "lib") if not (p and l)
           else "agree" if p["checksum"] == l["checksum"] else f"DIFFER ({p['checksum']} vs {l['checksum']})")
    g0, g1, e0, e1 = us(p, "graph_us"), us(l, "graph_us"), us(p, "eager_us"), us(l, "eager_us")
    md.append(f"| {size(k[1])} | {f(g0)} | {f(g1)} | {ratio(g1, g0)} | {f(e0)} | {f(e1)} | {ratio(e1, e0)} | {res} |")
    csv.append(",".join([k[0], str(k[1]), f(g0), f(g1), ratio(g1, g0), f(e0), f(e1), ratio(e1, e0), res.split(" ")[0]]))
summary = [s.strip() for s in open(os.path.join(out, "lib.log"), errors="replace") if "routing summary" in s] \
    if os.path.exists(os.path.join(out, "lib.log")) else []
md.append("\n### where the library's calls went (libccl_nccl's routing summary per comm, at its destroy; "
          "it counts the clocks' own max-over-ranks all-reduces and barriers too)\n")
md += [f"    {s}" for s in summary] or ["    none: the lib run did not reach its end (see lib.log)"]
open(os.path.join(out, "table.md"), "w").write("\n".join(md) + "\n")
open(os.path.join(out, "table.csv"), "w").write("\n".join(csv) + "\n")
print("\n".join(md))
EOF
