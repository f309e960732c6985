#!/usr/bin/env bash
# Installs what is missing (pinned Zig from PyPI, Bun and the dev packages from npm)
# and builds the native library. Idempotent; fast when nothing is missing.
# Sourced by ./lmhead; exports PATH with the pinned tools first.
set -euo pipefail
ZIG_VERSION=0.17.1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/.tools"

if command -v zig >/dev/null 2>&1 && [ "$(zig version)" = "$ZIG_VERSION" ]; then
  :
elif [ -x "$tools/zig/ziglang/zig" ] && [ "$("$tools/zig/ziglang/zig" version)" = "$ZIG_VERSION" ]; then
  export PATH="$tools/zig/ziglang:$PATH"
else
  echo "lmhead: installing zig $ZIG_VERSION (PyPI ziglang)" >&2
  rm -rf "$tools/zig"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
    --target "$tools/zig" "ziglang==$ZIG_VERSION" >&2
  export PATH="$tools/zig/ziglang:$PATH"
fi

stamp="$root/node_modules/.lmhead-lock"
want=$(sha256sum "$root/package-lock.json" | cut -d' ' -f1)
if [ ! -x "$root/node_modules/.bin/bun" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "lmhead: installing node packages (bun, typescript, bun-types, tinybench)" >&2
  (cd "$root" && npm ci --no-audit --no-fund --loglevel=error >&2)
  echo "$want" > "$stamp"
fi
export PATH="$root/node_modules/.bin:$PATH"

# On x86-64 Linux the checkout's library is the one the linux-x64 package ships (a baseline
# target, scripts/package.ts; the CPU kernels pick their level at run time), so
# `./lmhead package`, the package test and the GPU check (./lmhead, with build_target) find
# its CPU kernels in Zig's cache instead of compiling them again.
build_target=()
if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then build_target=(-Dtarget=x86_64-linux-gnu); fi
(cd "$root" && zig build ${build_target[@]+"${build_target[@]}"} --summary none)
