#!/usr/bin/env bash
# Prints the bytes the device tool copies from this checkout: tracked files and untracked files git
# does not ignore. CI's checkout may not be a git work tree (no .git directory); then it prints du's
# count of everything but the ignored build outputs and GPU bundle, an upper bound.
set -uo pipefail
cd "$(dirname "$0")/.."
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s -- 2>/dev/null |
    awk '{s += $1} END {print s + 0}'
else
  du -sb --exclude='./build*' --exclude=./.gpu-bundle --exclude=./.gpu-bundle.tar.xz \
    --exclude=./.whl --exclude=./.gl . | awk '{print $1}'
fi
