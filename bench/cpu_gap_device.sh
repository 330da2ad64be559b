#!/usr/bin/env bash
# Issue 25, item 1: where does the default (`all`) CPU backend lose against `native`? Builds the real
# llama.cpp tree (the 0.3.36 sdist's, trimmed, .gpu/llama.tar.xz) on a machine without Docker (the GPU
# host: scripts/gpu_run.py's machine, a Sapphire Rapids) in six ways that each isolate one candidate,
# with the CMake flags buildkit's levels give (plan/cpulevels.py cmake_flags), then runs llama-bench on
# one generated 100M-parameter Q8_0 model (bench/cpu_levels.py's shape), every build in one order and
# then the reverse, ROUNDS times in all. Prints the flags each CPU backend was compiled with and bench/cpu_gap_table.py's table.
#
#   all        buildkit's default: GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS (five x86 variants built here:
#              the loader picks the best this CPU runs, as in the image)
#   native     buildkit's `native`: GGML_NATIVE (-march=native), backend linked in, no DL
#   native-dl  -march=native (as CMAKE_C_FLAGS: ggml refuses GGML_NATIVE with DL) but as a loaded
#              backend (GGML_BACKEND_DL): the indirection alone
#   all-tune   `all` with -mtune=$TUNE: the tuning alone
#   march      one loaded backend compiled with -march=$MARCH (a named level; skipped when this GCC
#              does not know $MARCH)
#   v4         buildkit's x86-64-v4
#
#   bash bench/cpu_gap_device.sh OUT_DIR [THREADS]     (OUT_DIR gets the logs, the JSONL and the table;
#   docs/bench-runs/ keeps machine.txt, flags.txt, bench.jsonl and table.txt of a run)
#
# The machine's own names come from the environment: VARIANT, the ggml variant `all` loads there
# (sapphirerapids on the GPU host, zen4 on an AMD Zen 4); TUNE, GCC's -mtune for it (sapphirerapids;
# znver3 is the nearest GCC 12 knows for Zen 4); MARCH, the named -march (sapphirerapids; znver4 needs
# GCC 13). SRC: a llama.cpp tree to build (default: .gpu/llama.tar.xz unpacked). STEP=build or
# STEP=bench runs one half (so the bench can wait for a quiet machine).
set -euo pipefail
OUT=${1:?OUT_DIR}; THREADS=${2:-$(nproc)}  # THREADS: one count, or a list as llama-bench takes it (8,16)
ROUNDS=${ROUNDS:-4}; PROMPT=${PROMPT:-1024}; GEN=${GEN:-256}; REPS=${REPS:-5}
VARIANT=${VARIANT:-sapphirerapids}; TUNE=${TUNE:-$VARIANT}; MARCH=${MARCH:-$VARIANT}; STEP=${STEP:-both}
HERE=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/cpu-gap}
mkdir -p "$OUT" "$WORK"
if [ -z "${SRC:-}" ]; then
  [ -d "$WORK/llama" ] || tar -C "$WORK" -xJf "$HERE/.gpu/llama.tar.xz"
  SRC=$WORK/llama
fi
NAMES="all native native-dl all-tune march v4"
gcc -march="$MARCH" -x c -E - < /dev/null > /dev/null 2>&1 || { echo "this GCC has no -march=$MARCH: no march build"; NAMES="all native native-dl all-tune v4"; }
if [ "$STEP" != bench ]; then
: > "$OUT/flags.txt"
{ lscpu; echo; gcc --version | head -1; cmake --version | head -1; } > "$OUT/machine.txt" 2>&1 || true

OFF="-DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_BMI2=OFF -DGGML_AVX_VNNI=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
V4="-DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
COMMON="-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_CUDA=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON"
command -v ccache > /dev/null && COMMON="$COMMON -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"  # builds share what they can
# the loader picks the best variant this CPU runs among those built: x64 and the machine's own are enough
VARIANTS="ggml-cpu-x64 ggml-cpu-$VARIANT"  # (a SRC whose ggml/src/CMakeLists.txt declares only those builds faster)

build() {  # name, targets, cmake args...
  local name=$1 targets=$2; shift 2
  local start=$SECONDS
  cmake -S "$SRC" -B "$WORK/b-$name" $COMMON "$@" > "$OUT/cmake-$name.log" 2>&1
  ninja -C "$WORK/b-$name" $targets > "$OUT/ninja-$name.log" 2>&1
  echo "built $name in $((SECONDS - start)) s"
  # the flags of the CPU backend's main file, as the compiler got them
  python3 - "$WORK/b-$name/compile_commands.json" "$name" >> "$OUT/flags.txt" <<'PY'
import json, re, sys
seen = {}
for c in json.load(open(sys.argv[1])):
    if c["file"].endswith("ggml-cpu/ggml-cpu.c"):
        target = re.search(r"CMakeFiles/([^/]+)\.dir", c.get("output", "") + c["command"]).group(1)
        seen[target] = " ".join(f for f in c["command"].split() if re.match(r"-m|-O|-D GGML_(AVX|FMA|F16C|SSE|BMI|AMX)", f))
for target, flags in sorted(seen.items()):
    print(f"{sys.argv[2]:10} {target:28} {flags}")
PY
}

build all "llama-bench $VARIANTS" -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON $OFF
build native "llama-bench llama-quantize" -DGGML_NATIVE=ON -DGGML_BACKEND_DL=OFF -DGGML_CPU_ALL_VARIANTS=OFF $OFF
build native-dl "llama-bench ggml-cpu" -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=OFF $OFF \
  "-DCMAKE_C_FLAGS=-march=native" "-DCMAKE_CXX_FLAGS=-march=native"  # ggml refuses GGML_NATIVE with DL
build all-tune "llama-bench $VARIANTS" -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON \
  -DGGML_CPU_ALL_VARIANTS=ON $OFF "-DCMAKE_C_FLAGS=-mtune=$TUNE" "-DCMAKE_CXX_FLAGS=-mtune=$TUNE"
case " $NAMES " in *" march "*)
build march "llama-bench ggml-cpu" -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=OFF $OFF \
  "-DCMAKE_C_FLAGS=-march=$MARCH" "-DCMAKE_CXX_FLAGS=-march=$MARCH";;
esac
build v4 "llama-bench ggml-cpu" -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=OFF $V4

MODEL=$WORK/llama-100m-q8_0.gguf
PYTHONPATH="$SRC/gguf-py:$HERE/tests" python3 - "$MODEL" <<'PY'
import sys
from tinymodel import Shape, write_llama_model
write_llama_model(sys.argv[1], Shape(n_layer=14, n_embd=768, n_head=12, n_ff=2048), file_type="q8_0")
PY
ls -la "$MODEL" >> "$OUT/machine.txt"
fi
[ "$STEP" = build ] && exit 0
NAMES=${ONLY:-$NAMES}  # ONLY="all native": a longer run of fewer builds
MODEL=$WORK/llama-100m-q8_0.gguf
REVERSED=$(echo $NAMES | tr ' ' '\n' | tac | tr '\n' ' ')
: > "$OUT/bench.jsonl"
for round in $(seq 1 "$ROUNDS"); do  # odd rounds in one order, even rounds in the reverse
  for name in $([ $((round % 2)) = 1 ] && echo $NAMES || echo $REVERSED); do
    # -v: the log names the CPU backend file a DL build loaded
    "$WORK/b-$name/bin/llama-bench" -m "$MODEL" -t "$THREADS" -p "$PROMPT" -n "$GEN" -r "$REPS" -o jsonl -v \
      2> "$OUT/bench-$name-$round.log" | sed "s/^{/{\"build\": \"$name\", \"round\": $round, /" >> "$OUT/bench.jsonl"
    [ "$round" = 1 ] && { grep -o "loaded CPU backend from [^ ]*" "$OUT/bench-$name-1.log" | head -1 | sed "s/^/$name: /" || true; }
  done
done
python3 "$HERE/bench/cpu_gap_table.py" "$OUT/bench.jsonl" | tee "$OUT/table.txt"
[ -f "$OUT/flags.txt" ] && cat "$OUT/flags.txt"
