#!/usr/bin/env bash
# Issue 37's one run on the lent 16-core machine: where the cores go.
#
#   bash bench/device.sh prepare   # here: builds what travels (bench/out/device/)
#   bash bench/device.sh run       # there, through the `device` tool:
#       run(command="bash bench/device.sh run", carry=["bench/out/device"])
#
# The lent machine has no Rust toolchain and reaches nothing outside, so
# `prepare` puts beside the checkout, in the git-ignored bench/out/device/
# (one compressed archive, kit.tar.gz, that `run` unpacks there):
# the release worker with its debug sections stripped (the symbol table
# stays, for perf), this machine's perf with the libraries it links
# (used only where the lent machine has none), and jemalloc and mimalloc
# for LD_PRELOAD (is the allocator what stops the cores?).
#
# `run` writes to $OUT (the device tool's folder; bench/out/device-results
# elsewhere), step by step, so a run cut short still says what it found:
#   machine.txt   CPUs, topology, frequency, cgroup limits;
#   perf-stat.txt q0 (stateless) at 1 and 16 cores: IPC and GHz per core;
#   processes.txt q0 as 16 separate one-core processes beside one 16-core
#                 process: the machine's own scaling (frequency, memory)
#                 apart from anything shared inside the process;
#   allocators.txt q0, q4 and q8 at 16 cores with glibc, jemalloc, mimalloc;
#   profile-*.txt perf's flat profile of q0 and q8 at 16 cores, q0 at 1;
#   scaling.md    bench/scaling.sh at 1, 4, 8 and 16 cores (as time allows).
# DEVICE_STEPS picks steps (default machine,perf-stat,processes,allocators,
# profiles,scaling); SCALING_CORES and SCALING_QUERIES narrow the scaling
# run (`DEVICE_STEPS=machine,scaling SCALING_CORES=1,16 SCALING_QUERIES=q0,q8`).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DEV=bench/out/device

prepare() {
  set -e
  cargo build --release --locked -p sluice-worker --bin sluice-worker
  rm -rf "$DEV"
  mkdir -p "$DEV/lib"
  strip --strip-debug -o "$DEV/sluice-worker" target/release/sluice-worker
  cp /usr/bin/perf "$DEV/perf"
  ldd /usr/bin/perf | awk '$3 ~ /^\// {print $3}' |
    grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | xargs -I{} cp -L {} "$DEV/lib/"
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download libjemalloc2 libmimalloc2.0 >/dev/null && for d in *.deb; do dpkg-deb -x "$d" x; done)
  cp -L "$tmp"/x/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 "$tmp"/x/usr/lib/x86_64-linux-gnu/libmimalloc.so.2 "$DEV/"
  rm -rf "$tmp"
  # What travels is at most 64 MiB: one compressed archive.
  tar -C "$DEV" -czf "$DEV.tar.gz" .
  rm -rf "$DEV"
  mkdir -p "$DEV"
  mv "$DEV.tar.gz" "$DEV/kit.tar.gz"
  du -sh "$DEV"
}

[ "${1:-}" = prepare ] && { prepare; exit; }
[ "${1:-}" = run ] || { echo "usage: bash bench/device.sh prepare|run" >&2; exit 2; }

STEPS=",${DEVICE_STEPS:-machine,perf-stat,processes,allocators,profiles,scaling},"
step() { [[ "$STEPS" == *",$1,"* ]]; }
R=${OUT:-bench/out/device-results}
mkdir -p "$R"
STARTED=$SECONDS
BUDGET=${DEVICE_BUDGET_S:-480}
left() { echo $((BUDGET - (SECONDS - STARTED))); }
source bench/lib.sh
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
KIT=$TMP/kit
mkdir -p "$KIT"
tar -C "$KIT" -xzf "$DEV/kit.tar.gz"
W=$KIT/sluice-worker
nexmark_side_input "$TMP/side.json"
N=$(nproc)
if command -v perf >/dev/null; then PERF=perf; else PERF="env LD_LIBRARY_PATH=$KIT/lib $KIT/perf"; fi

step machine && {
  echo "# $(date -u)"; nproc; lscpu; echo; free -g; echo
  echo "cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null)"; echo "cpuset: $(cat /sys/fs/cgroup/cpuset.cpus.effective 2>/dev/null)"
  echo "perf_event_paranoid: $(cat /proc/sys/kernel/perf_event_paranoid)"; echo "perf: $PERF"; $PERF --version 2>&1
  grep MHz /proc/cpuinfo | sort | uniq -c
} >"$R/machine.txt" 2>&1

# manifest QUERY CORES: q's manifest at 2 M events per core, 16 partitions.
manifest() { nexmark_engine_manifest "$1" $((2000000 * $2)) 16 "$TMP/side.json" >"$TMP/$1-$2.yaml"; echo "$TMP/$1-$2.yaml"; }
rate() { sed -n 's/.*sluice-worker: done.*, \([0-9]*\) records\/s.*/\1/p' "$1"; }
# one QUERY CORES [prefix command…]: one run; prints its records/s.
one() {
  local q=$1 c=$2 m; shift 2
  m=$(manifest "$q" "$c")
  timeout 90 "$@" "$W" run -f "$m" --bounded --cores "$c" >/dev/null 2>"$TMP/err" || { echo "failed: $(tail -2 "$TMP/err")"; return; }
  rate "$TMP/err"
}

step perf-stat && {
  for c in 1 "$N"; do
    echo "## q0, $c core(s)"
    m=$(manifest q0 "$c")
    timeout 90 $PERF stat -e task-clock,cycles,instructions,cache-references,cache-misses,context-switches,cpu-migrations,page-faults \
      "$W" run -f "$m" --bounded --cores "$c" 2>&1 >/dev/null | grep -v '^\s*$'
  done
} >"$R/perf-stat.txt" 2>&1

step processes && {
  echo "q0, one process of $N cores: $(one q0 "$N") records/s"
  m=$(manifest q0 1)
  started=$(date +%s.%N)
  for i in $(seq 0 $((N - 1))); do
    taskset -c "$i" "$W" run -f "$m" --bounded --cores 1 --no-pin >/dev/null 2>"$TMP/p$i" &
  done
  wait
  ended=$(date +%s.%N)
  sum=0
  for i in $(seq 0 $((N - 1))); do r=$(rate "$TMP/p$i"); echo "process $i: ${r:-failed} records/s"; sum=$((sum + ${r:-0})); done
  echo "q0, $N one-core processes at once: $sum records/s summed; wall $(awk -v a="$started" -v b="$ended" 'BEGIN {print b - a}') s"
  echo "q0, one one-core process alone: $(one q0 1) records/s"
} >"$R/processes.txt" 2>&1

step allocators && {
  for q in q0 q8 q4; do
    echo "$q, $N cores, glibc: $(one "$q" "$N") records/s"
    for a in jemalloc.so.2 mimalloc.so.2; do
      echo "$q, $N cores, lib$a: $(one "$q" "$N" env LD_PRELOAD="$KIT/lib$a") records/s"
    done
  done
} >"$R/allocators.txt" 2>&1

step profiles && for spec in q0:"$N" q8:"$N" q0:1; do
  q=${spec%:*}; c=${spec#*:}
  m=$(manifest "$q" "$c")
  timeout 90 $PERF record -F 499 -o "$TMP/perf.data" -- "$W" run -f "$m" --bounded --cores "$c" >/dev/null 2>"$TMP/rec" || true
  { tail -3 "$TMP/rec"; $PERF report -i "$TMP/perf.data" --no-children --sort dso,sym --stdio 2>&1 | grep -v '^#' | grep -v '^\s*$' | head -70; } \
    >"$R/profile-$q-$c.txt" 2>&1
done

echo "scaling with $(left) s left" >"$R/scaling.log"
if step scaling && [ "$(left)" -gt 60 ]; then
  SLUICE_WORKER_BIN=$W BENCH_OUT="$R" timeout "$(left)" bash bench/scaling.sh --cores "${SCALING_CORES:-1,4,8,$N}" \
    ${SCALING_QUERIES:+--queries "$SCALING_QUERIES"} >>"$R/scaling.log" 2>&1
fi
echo "done after $((SECONDS - STARTED)) s" >>"$R/scaling.log"
