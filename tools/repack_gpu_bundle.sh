#!/bin/bash
# Recompresses the carried TVM compiler library (.gpu/libtvm_compiler.so.xz, a copy of
# ../shared/device) with xz's x86 branch filter: 59,389,504 -> 57,798,264 bytes, which leaves
# the device tool's 64 MiB transfer limit about 1.5 MB more room for the tracked tree.  The
# decompressed library is byte-identical (checked below); gpu-env.sh unpacks it unchanged.
# Takes about 5 minutes of one core and 3 GiB of memory.
set -euo pipefail
lib=${1:-.gpu/libtvm_compiler.so.xz}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
xz -dc "$lib" > "$tmp/lib.so"
xz --x86 --lzma2=preset=9e,dict=256MiB -c "$tmp/lib.so" > "$tmp/lib.so.xz"
xz -dc "$tmp/lib.so.xz" | cmp - "$tmp/lib.so"
echo "$(stat -c %s "$lib") -> $(stat -c %s "$tmp/lib.so.xz") bytes"
mv "$tmp/lib.so.xz" "$lib"
