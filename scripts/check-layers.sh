#!/usr/bin/env bash
# The include graph points down only (issue 28; README "How it is built"):
#   app/main.cpp -> app/cli -> app/dataset -> app/engine_io -> app/formats -> app/sys -> codec -> kernels
# A lower layer that includes a higher one is printed with the line, and the script fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
# layer: the include prefixes it must not use
check() {
  local dir=$1; shift
  local pat
  pat=$(printf '|%s' "$@")
  pat="#include \"(${pat:1})"
  if out=$(grep -rnE "$pat" "$dir" --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh'); then
    echo "layers: $dir includes a layer above it:"
    echo "$out"
    bad=1
  fi
}
check kernels codec/ app/
check codec app/
check app/sys app/formats/ app/engine_io/ app/dataset/ app/cli/
check app/formats app/engine_io/ app/dataset/ app/cli/
check app/engine_io app/dataset/ app/cli/
check app/dataset app/cli/
# the Python module (python/src) sits beside the commands (app/cli): on the dataset layer (read_dataset
# judges an output's shards with status's own functions) and below, never on the commands; nothing of
# the CLI's layers includes it
check python app/cli/
check app python/
check codec python/
check kernels python/
# every app source lives in a layer folder (main.cpp alone at the top)
if stray=$(find app -maxdepth 1 -type f \( -name '*.h' -o -name '*.cpp' \) ! -name main.cpp | sort) && [ -n "$stray" ]; then
  echo "layers: files outside the layer folders of app/:"
  echo "$stray"
  bad=1
fi
[ $bad = 0 ] && echo "layers: the include graph points down"
exit $bad
