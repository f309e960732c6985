#!/bin/sh
# Builds the bench's CUDA peer: ggml's CUDA backend from ggml's own source, for one GPU
# architecture only, so that it builds in minutes. (node-llama-cpp's prebuilt CUDA package
# carries every architecture, 155 MB, too large to carry to a machine with no network.)
#
#   bench/peer/build-cuda.sh GGML_SOURCE OUT [ARCH]
#
# GGML_SOURCE: github.com/ggml-org/ggml at tag v0.19.0, the version bench/peer/shim.c is
# declared for (fetched by whoever runs this; never committed here). ARCH: CMake's CUDA
# architecture, 90 for an H100 or H200; default native (the GPU of this machine). Needs CMake,
# a C and C++ compiler and CUDA's nvcc. Writes libggml-base.so and libggml-cuda.so into OUT;
# then: LMHEAD_PEER_CUDA_DIR=OUT ./lmhead bench --backend cuda --peer ggml
set -eu
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 GGML_SOURCE OUT [ARCH]" >&2
    exit 2
fi
src=$1
out=$2
arch=${3:-native}
minor=$(sed -n 's/^set(GGML_VERSION_MINOR \([0-9]*\))$/\1/p' "$src/CMakeLists.txt")
if [ "$minor" != 19 ]; then
    echo "$0: $src is not ggml 0.19 (GGML_VERSION_MINOR '$minor'); shim.c is declared for v0.19.0" >&2
    exit 1
fi
command -v nvcc >/dev/null || PATH=/usr/local/cuda/bin:$PATH
# ggml names its commit from git: a source copied into another repository must not take that
# repository's (it reports 'unknown' instead).
GIT_CEILING_DIRECTORIES=$(dirname "$(cd "$src" && pwd)")
export GIT_CEILING_DIRECTORIES
generator=
command -v ninja >/dev/null && generator="-G Ninja"
# Backends as loadable modules (the shim dlopens libggml-cuda.so, as it does a CPU variant);
# no flash attention or NCCL: the bench times one mul_mat.
# shellcheck disable=SC2086
cmake -S "$src" -B "$out/build" $generator -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_BACKEND_DL=ON -DGGML_CUDA=ON -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DGGML_NATIVE=OFF \
    -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF -DCMAKE_CUDA_ARCHITECTURES="$arch"
cmake --build "$out/build" --target ggml-cuda -j "$(nproc)"
find "$out/build" \( -name 'libggml-base.so*' -o -name 'libggml-cuda.so*' \) -exec cp -a {} "$out/" \;
ls "$out/libggml-base.so" "$out/libggml-cuda.so"
