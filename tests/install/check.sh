#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds a consumer program twice: with
# find_package(attn) and with pkg-config.  Usage: check.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/attn.h" && test -f "$work/prefix/include/attn_tasks.h"
cmake -S "$src/tests/install" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/cfg.log"
cmake --build "$work/cmake" > "$work/build.log"
"$work/cmake/consumer"
libdir=$(dirname "$(find "$work/prefix" -name attn.pc | head -n 1)")
export PKG_CONFIG_PATH="$libdir"
cc "$src/tests/install/consumer.c" -o "$work/consumer_pc" $(pkg-config --cflags attn) \
   $(pkg-config --libs --static attn)
LD_LIBRARY_PATH="$(dirname "$libdir")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/consumer_pc"
# the core tier alone (ATTN_CORE_ONLY leaves out BERT and eval) is enough for the consumer
cc -DATTN_CORE_ONLY "$src/tests/install/consumer.c" -o "$work/consumer_core" \
   $(pkg-config --cflags attn) $(pkg-config --libs --static attn)
echo "install check passed"
