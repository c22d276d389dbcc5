#!/usr/bin/env bash
# The CUDA benchmark on a lent GPU (docs/cuda.md, "Measuring on a GPU"), in three steps:
#
#   here, once:        bash benchmarks/gpu_session.sh pack
#   device call 1:     run(command="bash benchmarks/gpu_session.sh stash", carry=[".gpu1"])
#   device call 2:     run(command="DCMLIR_COMMIT=<sha> bash benchmarks/gpu_session.sh run",
#                          carry=[".gpu2"], timeout_s=600)   # within 30 s of call 1
#   or, for the CPU check of issue 15's scaling note (benchmarks/bigger_machine.py):
#                      run(command="DCMLIR_COMMIT=<sha> bash benchmarks/gpu_session.sh cpu",
#                          carry=[".gpu2"], timeout_s=560)   # $OUT/results.tgz
#
# Why two calls: IREE's compiler and runtime for Python 3.12 are 99 MB as wheels and
# 49 MB stripped and xz-compressed, and one call carries at most 64 MiB with the
# working tree (about 27 MB). `pack` splits the archive in two; call 1 leaves the first
# part on the machine, which stays warm for 30 s; call 2 brings the second, installs
# and runs benchmarks/cuda_benchmark.py, writing everything to $OUT.
#
# `run` needs nothing else from the device image: torch with CUDA, numpy, scikit-learn,
# scipy, networkx and matplotlib are there (device README, KINDS.md).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IREE_VERSION="3.13.0"
STASH=/tmp/dcmlir-stash
SITE=/tmp/dcmlir-site
PART_BYTES=26000000

pack() {
  # On the development machine (no GPU needed; takes a few minutes of CPU for xz).
  # DCMLIR_WHEELS=DIR: wheels already downloaded there; DCMLIR_XZ: xz level (default -9e).
  local scratch wheels
  scratch="$(mktemp -d /tmp/dcmlir-pack.XXXXXX)"
  wheels="${DCMLIR_WHEELS:-$scratch/wheels}"
  if [ -z "${DCMLIR_WHEELS:-}" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$wheels" \
      "iree-base-compiler==$IREE_VERSION" "iree-base-runtime==$IREE_VERSION"
  fi
  mkdir -p "$scratch/site"
  for wheel in "$wheels"/iree_base_*-"$IREE_VERSION"-cp312-*.whl; do
    unzip -q -o "$wheel" -d "$scratch/site"
  done
  rm -rf "$scratch/site/iree/_runtime_libs_tracy"  # the tracing runtime: not used
  strip --strip-unneeded "$scratch/site/iree/compiler/_mlir_libs/libIREECompiler.so"
  (cd "$scratch/site" && tar -cf - .) | nice xz "${DCMLIR_XZ:--9e}" -T2 > "$scratch/iree.tar.xz"
  rm -rf "$ROOT/.gpu1" "$ROOT/.gpu2"
  mkdir -p "$ROOT/.gpu1" "$ROOT/.gpu2"
  split -b "$PART_BYTES" -d -a 1 "$scratch/iree.tar.xz" "$scratch/iree.tar.xz.part"
  mv "$scratch/iree.tar.xz.part0" "$ROOT/.gpu1/"
  mv "$scratch"/iree.tar.xz.part[1-9] "$ROOT/.gpu2/"
  sha256sum "$scratch/iree.tar.xz" | cut -d' ' -f1 > "$ROOT/.gpu2/iree.tar.xz.sha256"
  local exclude
  exclude="$(cd "$ROOT" && git rev-parse --git-path info/exclude)"
  mkdir -p "$(dirname "$ROOT/$exclude")"
  for dir in /.gpu1/ /.gpu2/; do
    grep -qxF "$dir" "$ROOT/$exclude" 2>/dev/null || echo "$dir" >> "$ROOT/$exclude"
  done
  rm -rf "$scratch"
  du -sh "$ROOT/.gpu1" "$ROOT/.gpu2"
  local tree
  tree="$(cd "$ROOT" && git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)"
  for dir in .gpu1 .gpu2; do
    local total=$((tree + $(du -sb "$ROOT/$dir" | cut -f1)))
    if [ "$total" -gt 67108864 ]; then
      echo "gpu_session: warning: the working tree plus $dir is $total bytes, over one call's" \
        "64 MiB: for the two calls only, untrack the largest results file (docs/cuda.md)" >&2
    fi
  done
}

stash() {
  # Device call 1: keep the first part on the machine for call 2.
  mkdir -p "$STASH"
  cp "$ROOT"/.gpu1/iree.tar.xz.part* "$STASH/"
  ls -la "$STASH"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
}

install() {
  if [ ! -e "$STASH/iree.tar.xz.part0" ]; then
    echo "gpu_session: $STASH/iree.tar.xz.part0 is missing: the machine was not the one of" \
      "call 1 (it went back after 30 s idle); run 'stash' again, then 'run' at once" >&2
    exit 3
  fi
  cat "$STASH"/iree.tar.xz.part* "$ROOT"/.gpu2/iree.tar.xz.part* > /tmp/iree.tar.xz
  echo "$(cat "$ROOT/.gpu2/iree.tar.xz.sha256")  /tmp/iree.tar.xz" | sha256sum -c --quiet
  rm -rf "$SITE" && mkdir -p "$SITE"
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2])" \
    /tmp/iree.tar.xz "$SITE"
  # dcmlir as the wheel lays it out: dcmlir/passes and dcmlir/tools are links to ../passes
  # and ../tools in the checkout; -L copies what they point to
  rm -rf "$SITE/dcmlir" && cp -rL "$ROOT/dcmlir" "$SITE/dcmlir"
  export PYTHONPATH="$SITE:$ROOT/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
  python3 -c "import dcmlir, iree.runtime as rt; from dcmlir.ir.iree import cuda_device_available as c; print('dcmlir', dcmlir.__version__, 'cuda device:', c())"
}

run() {
  # Device call 2: install, then the benchmark; everything lands in $OUT.
  local out="${OUT:-/tmp/dcmlir-out}"
  mkdir -p "$out"
  install
  export PYTHONUNBUFFERED=1
  set -o pipefail
  python3 "$ROOT/benchmarks/cuda_benchmark.py" --arch "${DCMLIR_ARCH:-sm_90}" --out "$out" \
    --work /tmp/dcmlir-work --deadline "${DCMLIR_DEADLINE:-420}" "$@" 2>&1 \
    | tee "$out/cuda_benchmark.log"
}

cpu() {
  # Device call 2 for the CPU check of the scaling note (issue 15): the machine's cores,
  # not its GPU; benchmarks/bigger_machine.py, everything to $OUT.
  # A device call returns a few files of $OUT only: the results travel as one archive.
  local out="${OUT:-/tmp/dcmlir-out}" work=/tmp/dcmlir-bigger status=0
  mkdir -p "$out" "$work"
  install
  export PYTHONUNBUFFERED=1
  set -o pipefail
  python3 "$ROOT/benchmarks/bigger_machine.py" --out "$work" \
    --deadline "${DCMLIR_DEADLINE:-330}" "$@" > "$work/bigger_machine.log" 2>&1 || status=$?
  tail -40 "$work/bigger_machine.log"
  (cd "$work" && tar -czf "$out/results.tgz" --exclude=work --exclude=oracle_records.jsonl .)
  return "$status"
}

command="${1:-}"
shift || true
case "$command" in
  pack) pack ;;
  stash) stash ;;
  run) run "$@" ;;
  cpu) cpu "$@" ;;
  *)
    echo "usage: $0 pack | stash | run [cuda_benchmark.py options] | cpu [bigger_machine.py options]" >&2
    exit 2
    ;;
esac
