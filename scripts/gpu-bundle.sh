#!/usr/bin/env bash
# Builds the CUDA binaries here (sm_90 for the H100/H200 unless CUDAARCHS says otherwise) and
# packs them into .gpu-bundle/ with every shared library they load, the dynamic loader and glibc
# included, so they run on a GPU machine whose image lacks this project's Debian packages and
# cannot fetch them. scripts/gpu-check.sh uses the bundle when it is there (carry .gpu-bundle).
set -euo pipefail
cd "$(dirname "$0")/.."
# MIMI_GPU_BUNDLE_FROM=DIR packs an existing CUDA build instead (CI packs ./build, whose sm_80+90
# binaries are a little larger than sm_90 alone: its size check is an upper bound)
B=${MIMI_GPU_BUNDLE_FROM:-build-gpu}
if [ -z "${MIMI_GPU_BUNDLE_FROM:-}" ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIMI_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDAARCHS:-90}" >/dev/null
  cmake --build build-gpu -j "${MIMI_JOBS:-2}" --target mimi test_ops test_gpu_kernels test_golden test_streaming test_batch
fi
"$B/mimi" info --json 2>/dev/null | grep -q '"gpu_backend":"CUDA"' || { echo "gpu-bundle: $B is not a CUDA build" >&2; exit 1; }
rm -rf .gpu-bundle
mkdir -p .gpu-bundle/lib
cp "$B/mimi" "$B/tests/test_ops" "$B/tests/test_gpu_kernels" "$B/tests/test_golden" "$B/tests/test_streaming" "$B/tests/test_batch" .gpu-bundle/
for b in .gpu-bundle/mimi .gpu-bundle/test_ops .gpu-bundle/test_gpu_kernels .gpu-bundle/test_golden .gpu-bundle/test_streaming .gpu-bundle/test_batch; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}'
done | sort -u | while read -r lib; do cp -L "$lib" .gpu-bundle/lib/; done
# glibc's compatibility stubs, which the GPU driver's libcuda links against: with the bundled
# libc they must be the bundled glibc's too, not the machine's
for stub in libdl.so.2 libpthread.so.0 librt.so.1; do
  cp -L "$(dirname "$(ldd .gpu-bundle/mimi | awk '$1 == "libc.so.6" {print $3}')")/$stub" .gpu-bundle/lib/
done
# what travels to the device machine: the bundle compressed (~6 MB instead of ~28; the tree and the
# carried paths together must stay under the device tool's 64 MiB), unpacked there by gpu-check.sh
tar -cJf .gpu-bundle.tar.xz .gpu-bundle
du -sh .gpu-bundle .gpu-bundle.tar.xz
tree=$(bash scripts/tree-bytes.sh)
echo "carry: .gpu-bundle.tar.xz (tree $((tree >> 20)) MiB + bundle $(($(stat -c %s .gpu-bundle.tar.xz) >> 20)) MiB; the device tool takes 64 MiB, tests/bundle_test.sh holds it to 45)"
