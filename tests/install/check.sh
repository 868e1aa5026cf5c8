#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds a consumer program twice: with
# find_package(attn) and with pkg-config.  Usage: check.sh SOURCE_DIR BUILD_DIR WORK_DIR
# [TOOLCHAIN_FILE C_COMPILER EMULATOR...]: a cross build (cmake/aarch64-linux-gnu.cmake) gives its
# toolchain file and compiler, and the consumers run under the emulator (qemu-aarch64 -L ...).
set -euo pipefail
src=$1 build=$2 work=$3
toolchain=${4:-}
read -r -a cc <<< "${5:-cc}"
emu=("${@:6}")
cross=()
[ -n "$toolchain" ] && cross=(-DCMAKE_TOOLCHAIN_FILE="$toolchain")
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/attn.h" && test -f "$work/prefix/include/attn_tasks.h"
cmake -S "$src/tests/install" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" \
      ${cross[@]+"${cross[@]}"} > "$work/cfg.log"
cmake --build "$work/cmake" > "$work/build.log"
${emu[@]+"${emu[@]}"} "$work/cmake/consumer"
libdir=$(dirname "$(find "$work/prefix" -name attn.pc | head -n 1)")
export PKG_CONFIG_PATH="$libdir"
"${cc[@]}" "$src/tests/install/consumer.c" -o "$work/consumer_pc" $(pkg-config --cflags attn) \
   $(pkg-config --libs --static attn)
LD_LIBRARY_PATH="$(dirname "$libdir")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ${emu[@]+"${emu[@]}"} "$work/consumer_pc"
# the core tier alone (ATTN_CORE_ONLY leaves out BERT and eval) is enough for the consumer
"${cc[@]}" -DATTN_CORE_ONLY "$src/tests/install/consumer.c" -o "$work/consumer_core" \
   $(pkg-config --cflags attn) $(pkg-config --libs --static attn)
echo "install check passed"
