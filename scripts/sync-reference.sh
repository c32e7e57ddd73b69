#!/usr/bin/env bash
# Copies the golden reference (../shared/reference, made with Kyutai's official code) into
# tests/data, so new cases are picked up by the golden tests. Keeps tests/data/PROVENANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-../shared/reference}
cp -r "$src"/. tests/data/
chmod -R u+w tests/data
echo "tests/data now holds everything in $src"
