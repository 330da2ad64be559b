#!/usr/bin/env bash
# Issue 37 on the GPU host (no Docker): the device calls of docs/gpu-runs/2026-12-05-h200/PROCEDURE.md.
# Each step fits one 10-minute device call; run them back to back so the machine stays warm (the native
# build folder under $WORK survives between calls only while it does).
#
#   bash bench/gpu_correctness_device.sh suites OUT BUNDLE...   the fork's test-backend-ops of each
#        bundle (scripts/gpu_run.py extract of a `-tests` image), all at once on the one GPU, with
#        the native build of bench/gpu_side_by_side.py niced beside them; stopped when they end
#   bash bench/gpu_correctness_device.sh ops OUT OPS BUNDLE...   the same, only the ops (comma list)
#   bash bench/gpu_correctness_device.sh native OUT              finish the native build
#   bash bench/gpu_correctness_device.sh workload OUT BUNDLE     the dflash profile (tiny and medium
#        qwen35 + dflash-draft of scripts/fork_models.py), and turbo4 KV caches, on the image's server
#   bash bench/gpu_correctness_device.sh sbs OUT BUNDLE NAME [ARGS]   image against native, side by side
#
# Sources under .gpu/ (carried): fork-src.tar.xz (git archive of the image's commit); .whl/ has gguf.
set -uo pipefail
step=${1:?step}; OUT=${2:?OUT}; shift 2
HERE=$(cd "$(dirname "$0")/.." && pwd); cd "$HERE"
WORK=${WORK:-/tmp/issue37}; mkdir -p "$OUT" "$WORK"
LIMIT=${LIMIT:-540}  # seconds a step may take, under the device's 600
GGUF=$(ls "$HERE"/.whl/gguf-*.whl 2>/dev/null | head -1)
native() {  # the fork's own flags, one arch, only llama-server; resumes a build folder that is there
  timeout "${1:-$LIMIT}" nice -n 19 python3 bench/gpu_side_by_side.py --source .gpu/fork-src.tar.xz \
    --build-only --work "$WORK/sbs" --out "$OUT/native" > "$OUT/native-build.log" 2>&1
  echo "native build: exit $? ($(date +%T))"; tail -n 3 "$OUT/native-build.log"
  local b=$WORK/sbs/build-native  # per-object compile times (GGML_CUDA_FA_ALL_QUANTS' share) and sizes
  cp "$b/.ninja_log" "$OUT/native.ninja_log" 2> /dev/null
  ls -l "$b"/bin/*.so* > "$OUT/native-libs.txt" 2> /dev/null
}
models() {
  [ -f "$WORK/m/qwen35-medium.gguf" ] && return
  PYTHONPATH=$GGUF python3 scripts/fork_models.py --out "$WORK/m" && \
  PYTHONPATH=$GGUF python3 scripts/fork_models.py --out "$WORK/m" --size medium
}
suites() {  # OPS BUNDLE...
  local ops=$1; shift; local pids=() n=0 b
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  local npid=; if [ "${NATIVE:-1}" = 1 ]; then native "$LIMIT" & npid=$!; fi
  for b in "$@"; do
    n=$((n + 1)); local name; name=$(basename "$b" .tar.xz)
    local oargs=(); local o; for o in ${ops//,/ }; do oargs+=(-o "$o"); done
    python3 scripts/gpu_run.py backend-ops "$b" "${oargs[@]}" --work "$WORK/$name" --out "$OUT/$name" \
      --timeout $((LIMIT - 20)) > "$OUT/$name.console.txt" 2>&1 &
    pids+=($!)
  done
  for b in "${pids[@]}"; do wait "$b"; done
  if [ -n "$npid" ]; then pkill -f gpu_side_by_side.py; pkill ninja; wait "$npid" 2> /dev/null; fi
  for b in "$@"; do echo "== $(basename "$b")"; tail -n 2 "$OUT/$(basename "$b" .tar.xz).console.txt"; done
}
case $step in
  suites) suites "" "$@" ;;
  ops) ops=$1; shift; suites "$ops" "$@" ;;
  native) native ;;
  workload)
    b=${1:?BUNDLE}; models
    dflash=(-md "$WORK/m/dflash-draft-SIZE.gguf" --spec-type dflash -ngld 99 --ctx-size-draft 256 --flash-attn on)
    for size in tiny medium; do
      python3 scripts/gpu_run.py run "$b" --model "$WORK/m/qwen35-$size.gguf" --work "$WORK/run" \
        --out "$OUT/dflash-$size" --bench --runs 3 --max-tokens 800 --bench-timeout 150 -- \
        "${dflash[@]/SIZE/$size}" > "$OUT/dflash-$size.console.txt" 2>&1
      echo "dflash $size: exit $?"; tail -n 4 "$OUT/dflash-$size.console.txt"
    done
    for kv in turbo4 q8_0; do
      python3 scripts/gpu_run.py run "$b" --model "$WORK/m/qwen35-medium.gguf" --work "$WORK/run" \
        --out "$OUT/kv-$kv" --bench --runs 3 --max-tokens 800 --bench-timeout 150 -- \
        --flash-attn on -ctk "$kv" -ctv "$kv" > "$OUT/kv-$kv.console.txt" 2>&1
      echo "kv $kv: exit $?"; tail -n 4 "$OUT/kv-$kv.console.txt"
    done ;;
  sbs)  # sbs OUT BUNDLE NAME [llama-server args]: NAME names the output folder
    b=${1:?BUNDLE}; name=${2:?NAME}; shift 2; models
    timeout "$LIMIT" python3 bench/gpu_side_by_side.py --source .gpu/fork-src.tar.xz --work "$WORK/sbs" \
      --bundle "$b" --model "$WORK/m/qwen35-medium.gguf" --rounds "${ROUNDS:-3}" --runs 3 \
      --out "$OUT/sbs-$name" -- "$@" > "$OUT/sbs-$name.console.txt" 2>&1
    echo "side by side $name: exit $?"; tail -n 8 "$OUT/sbs-$name.console.txt" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
