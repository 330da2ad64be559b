#!/usr/bin/env bash
# Issue 21, item 7: the rebuild a user waits for, on the real llama.cpp tree for one CUDA arch: a cold
# compile against the compile after a change to one CUDA source file with the ccache restored, as a
# fresh CI runner (or a fresh builder) has it: a new build folder, the ccache of the last build.
#
# Runs without Docker (the GPU host: scripts/gpu_run.py's machine), with the CMake flags buildkit gives
# an sm_120 CUDA image (`buildkit build --arch sm_120 --print`: the flags label; GGML_BACKEND_DL with
# every x86 CPU variant, CUDA for 120a-real only) and the ccache settings of its compile step
# (templates/_build.j2: CCACHE_BASEDIR, CCACHE_NOHASHDIR, the same build folder path every time). The
# tree is the 0.3.36 sdist's, trimmed (.gpu/llama.tar.xz). A ccache that the machine lacks is Debian
# 12's, carried as .gpu/ccache_*.deb and .gpu/libhiredis*.deb.
#
#   bash bench/cuda_rebuild_device.sh OUT_DIR        (OUT_DIR gets the logs and times.txt)
#
# The change is code (a comment would leave the preprocessed text, and so ccache's key, as it was):
# one device variable appended to ggml/src/ggml-cuda/norm.cu. Prints each build's configure and
# compile seconds, ccache's hits and misses, and the rebuild's share of the cold compile.
set -euo pipefail
OUT=${1:?OUT_DIR}; JOBS=${JOBS:-$(nproc)}; LIMIT=${LIMIT:-450}  # skip the rebuild if cold took longer
HERE=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/cuda-rebuild}
rm -rf "$WORK"; mkdir -p "$OUT" "$WORK"
tar -C "$WORK" -xJf "$HERE/.gpu/llama.tar.xz"
SRC=$WORK/llama
if ! command -v ccache > /dev/null; then
  for deb in "$HERE"/.gpu/*.deb; do dpkg-deb -x "$deb" "$WORK/ccache-root"; done
  export PATH=$WORK/ccache-root/usr/bin:$PATH LD_LIBRARY_PATH=$WORK/ccache-root/usr/lib/x86_64-linux-gnu
fi
export PATH=/usr/local/cuda/bin:$PATH
export CCACHE_DIR=$WORK/ccache CCACHE_BASEDIR=$WORK CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=20G
{ nproc; lscpu | grep "Model name"; nvcc --version | tail -2; ccache --version | head -1; cmake --version | head -1;
  gcc --version | head -1; } > "$OUT/machine.txt" 2>&1 || true

OFF="-DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_BMI2=OFF -DGGML_AVX_VNNI=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
FLAGS="-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_BACKEND_DIR=/app/lib $OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_WEBUI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=120a-real -DGGML_CUDA_NO_VMM=ON"
LAUNCH="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"

build() {  # name: a fresh build folder (same path), configure, compile llama-server (the server image's target)
  local name=$1 t0 t1 t2
  rm -rf "$WORK/build"
  ccache --zero-stats > /dev/null
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  cmake -S "$SRC" -B "$WORK/build" -G Ninja $FLAGS $LAUNCH > "$OUT/cmake-$name.log" 2>&1
  t1=$(date +%s.%N)
  ninja -C "$WORK/build" -j "$JOBS" llama-server > "$OUT/ninja-$name.log" 2>&1
  t2=$(date +%s.%N)
  local stats
  stats=$(ccache --print-stats | awk -F'\t' '$1 ~ /_cache_hit$/ {h += $2} $1 == "cache_miss" {m += $2} END {print h + 0, m + 0}')
  echo "$name configure $(awk "BEGIN {printf \"%.1f\", $t1 - $t0}") compile $(awk "BEGIN {printf \"%.1f\", $t2 - $t1}")" \
    "hits_misses $stats" | tee -a "$OUT/times.txt"
  echo "$name objects: $(grep -c 'Building CUDA object' "$OUT/ninja-$name.log") CUDA, $(grep -c 'Building C' "$OUT/ninja-$name.log") C/C++/CUDA in all" | tee -a "$OUT/times.txt"
}

: > "$OUT/times.txt"
build cold
cold=$(awk '$1 == "cold" && $2 == "configure" {print $5}' "$OUT/times.txt")
if awk "BEGIN {exit !($cold > $LIMIT)}"; then echo "cold compile took ${cold} s (> $LIMIT): rebuild skipped" | tee -a "$OUT/times.txt"; exit 0; fi
echo '__device__ int buildkit_bench_change = 1;  // bench/cuda_rebuild_device.sh: one CUDA file changed' \
  >> "$SRC/ggml/src/ggml-cuda/norm.cu"
build one-file
awk '$2 != "configure" {next} $1 == "cold" {c = $3 + $5} $1 == "one-file" {r = $3 + $5}
     END {if (c) printf "one-file rebuild / cold (configure + compile): %.1f%%\n", 100 * r / c}' "$OUT/times.txt" \
  | tee -a "$OUT/times.txt"
