# Shared by the test scripts: run suites, keep the counts of the whole run in one file, print the
# closing line. Sourced, not run. The counts file is inherited by sub-scripts through the
# environment, so a suite run inside scripts/test-sanitize.sh adds to the caller's totals.
if [ -z "${MIMI_SUITE_COUNTS:-}" ]; then
  MIMI_SUITE_COUNTS=$(mktemp /tmp/mimi-suite-counts.XXXXXX)
  export MIMI_SUITE_COUNTS
  MIMI_SUITE_OWNER=1
fi

# record NAME PASSED FAILED SKIPPED
record() {
  echo "$2 $3 $4 $1" >>"$MIMI_SUITE_COUNTS"
}

# step NAME CMD...: a build or setup step; its failure counts as one failed test.
step() {
  local name=$1 t0=$SECONDS; shift
  echo "=== $name"
  if ! "$@"; then
    echo "=== $name: FAILED ($((SECONDS - t0)) s)"
    record "$name" 0 1 0
    return 1
  fi
  echo "=== $name: $((SECONDS - t0)) s"
}

# check NAME CMD...: one scripted test (not ctest); counts as one passed or one failed test.
check() {
  local name=$1; shift
  echo "=== $name"
  if "$@"; then
    record "$name" 1 0 0
  else
    echo "=== $name: FAILED"
    record "$name" 0 1 0
    return 1
  fi
}

# suite NAME DIR CTEST_ARGS...: runs ctest in DIR and records its per-test results.
suite() {
  local name=$1 dir=$2; shift 2
  local log t0=$SECONDS; log=$(mktemp /tmp/mimi-ctest.XXXXXX)
  echo "=== $name tests"
  if [ ! -d "$dir" ]; then
    echo "=== $name: no build dir $dir"
    record "$name" 0 1 0
    return 1
  fi
  (cd "$dir" && ctest "$@") 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  # One line per test: "  3/16 Test  #3: name ....   Passed    0.1 sec" (or ***Failed, ***Skipped, ...)
  local p f s
  p=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* +Passed +' "$log")
  s=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$log")
  f=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' "$log")
  f=$((f - p - s))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # ctest itself failed (no tests found, ...)
  rm -f "$log"
  echo "=== $name tests: $((SECONDS - t0)) s"
  record "$name" "$p" "$f" "$s"
  [ "$rc" -eq 0 ]
}

# closing_line: the whole run in one line; exit status 1 when anything failed.
closing_line() {
  local p=0 f=0 s=0 a b c rest
  while read -r a b c rest; do p=$((p + a)); f=$((f + b)); s=$((s + c)); done <"$MIMI_SUITE_COUNTS"
  echo
  echo "whole run:"
  while read -r a b c rest; do echo "  $rest: $a passed, $b failed, $c skipped"; done <"$MIMI_SUITE_COUNTS"
  [ -n "${MIMI_SUITE_OWNER:-}" ] && rm -f "$MIMI_SUITE_COUNTS"
  echo "$p passed, $f failed, $s skipped"
  [ "$f" -eq 0 ]
}
