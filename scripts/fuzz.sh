#!/usr/bin/env bash
# libFuzzer + ASan + UBSan (no recovery) over every parser of mimi (tests/fuzz/README.md).
#
#   scripts/fuzz.sh [--time SECONDS] [--runs N] [--timeout S] [--keep-going] [TARGET...|all]
#       build the targets (incrementally) and fuzz each in turn (default: all, 60 s each;
#       --runs N and --time S together: whichever comes first; --timeout: seconds one input
#       may take before it counts as a hang, default 20 — raise it for long runs at low priority),
#       starting from its committed seeds (tests/fuzz/seeds/<target>/) copied into a scratch
#       corpus (build-fuzz/corpus/<target>/, kept between runs). Prints per target: executions,
#       exec/s, coverage (cov/ft), corpus size and findings (saved under build-fuzz/findings/).
#       --keep-going: libFuzzer's fork mode, which goes on past crashes/OOMs/timeouts.
#   scripts/fuzz.sh --smoke           every target for 10 s (CI: its seeds and a short mutation run)
#   scripts/fuzz.sh --replay [TARGET...]
#       every reproducer in tests/fuzz/regressions/<target>/ through its target once (those
#       listed in regressions/<target>/OPEN are known, unfixed bugs: reported, not failed)
#   scripts/fuzz.sh --make-seeds      regenerate tests/fuzz/seeds/ (deterministic)
#   scripts/fuzz.sh --build           build only
# Exit status: non-zero when a target crashed (or a regression failed). Needs clang (14+).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL=(safetensors_weights safetensors_tokens npy text mimi config audio stream_encode stream_decode manifest)
OUT=build-fuzz
# stream_encode: 4 KB is up to 64 frames of the streaming micro model (raw s16 PCM at its 1 kHz);
# longer streams only repeat the per-frame path and cut the exec rate in half.
declare -A MAXLEN=([safetensors_weights]=32768 [safetensors_tokens]=4096 [npy]=4096 [text]=4096 [mimi]=4096
                   [config]=4096 [audio]=8192 [stream_encode]=4096 [stream_decode]=4096 [manifest]=8192)

mode=fuzz secs=60 secs_given=0 runs="" unit_timeout=20 keep_going=0 targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) secs=$2; secs_given=1; shift ;;
    --timeout) unit_timeout=$2; shift ;;
    --runs) runs=$2; shift ;;
    --smoke) secs=10 ;;
    --keep-going) keep_going=1 ;;
    --replay) mode=replay ;;
    --make-seeds) mode=seeds ;;
    --build) mode=build ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    all) targets=("${ALL[@]}") ;;
    [0-9]*) secs=$1 ;;  # the old interface: scripts/fuzz.sh SECONDS
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) t=${1#fuzz_}
       if [[ ! " ${ALL[*]} " == *" $t "* ]]; then echo "unknown target '$1' (${ALL[*]})" >&2; exit 2; fi
       targets+=("$t") ;;
  esac
  shift
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
command -v clang++ >/dev/null || { echo "fuzz.sh: needs clang++ (apt-get install clang)" >&2; exit 2; }

build() {
  make -s -f tests/fuzz/Makefile -j2 OUT=$OUT "$@" >&2
}

if [ $mode = seeds ]; then
  build $OUT/make_seeds
  $OUT/make_seeds tests/fuzz/seeds
  mkdir -p tests/fuzz/seeds/config
  for c in tiny tiny-window full; do
    cp tests/data/$c/config.json tests/fuzz/seeds/config/$c.hf.json
    cp tests/data/$c/moshi_config.json tests/fuzz/seeds/config/$c.moshi.json
  done
  find tests/fuzz/seeds -type f -size +8k -not -path '*/safetensors_weights/*' -printf 'warning: %p is over 8 KB (%s bytes)\n'
  exit 0
fi

build $(printf "$OUT/fuzz_%s " "${targets[@]}")
[ $mode = build ] && exit 0

san_env() {
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0:abort_on_error=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}
}
san_env

if [ $mode = replay ]; then
  failed=0
  for t in "${targets[@]}"; do
    dir=tests/fuzz/regressions/$t
    [ -d $dir ] || continue
    open=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' $dir/OPEN 2>/dev/null | grep -v '^$' || true)
    for f in $dir/*; do
      name=$(basename "$f")
      [ -f "$f" ] && [ "$name" != OPEN ] && [[ "$name" != *.md ]] || continue
      log=$OUT/replay-$t-$name.log
      if $OUT/fuzz_$t -runs=1 -rss_limit_mb=2048 -timeout=60 "$f" >"$log" 2>&1; then ok=1; else ok=0; fi
      if grep -qx "$name" <<<"$open"; then
        [ $ok = 1 ] && echo "FIXED? $t/$name passes but is listed in OPEN: remove it from $dir/OPEN" \
                    || echo "open   $t/$name (known bug, still fails: $(grep -m1 -E 'ERROR|FINDING|terminate|runtime error' "$log" | cut -c1-120))"
      elif [ $ok = 1 ]; then
        echo "ok     $t/$name"
      else
        echo "FAIL   $t/$name (log: $log)"; grep -m3 -E 'ERROR|FINDING|terminate|runtime error|#[0-9]+ 0x' "$log" | sed 's/^/         /'
        failed=1
      fi
    done
  done
  exit $failed
fi

# fuzz_one TARGET: fuzzes one target; its summary line goes to $OUT/summary-TARGET; fails on a finding.
fuzz_one() {
  local t=$1 corpus findings before slow_before args log rc last execs t_s eps cov ft corp new slow found line
  corpus=$OUT/corpus/$t findings=$OUT/findings/$t
  mkdir -p $corpus $findings
  cp -n tests/fuzz/seeds/$t/* $corpus/ 2>/dev/null || true
  # libFuzzer's slow-unit-* files are inputs that took > 10 s of wall time: on a loaded machine
  # (a niced fuzzer beside builds) that is the scheduler, not a hang (-timeout catches hangs), so
  # they are reported but not counted as findings
  findings_now() { ls $findings | grep -vc '^slow-unit-' || true; }
  before=$(findings_now)
  slow_before=$(ls $findings | grep -c '^slow-unit-' || true)
  args=(-max_len=${MAXLEN[$t]} -rss_limit_mb=2048 -timeout=$unit_timeout -print_final_stats=1 -artifact_prefix=$findings/)
  [ -n "$runs" ] && args+=(-runs=$runs)
  { [ -z "$runs" ] || [ $secs_given = 1 ]; } && args+=(-max_total_time=$secs)
  [ $keep_going = 1 ] && args+=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
  log=$OUT/fuzz-$t.log
  echo "== fuzz_$t (${runs:+$runs runs, }$( [ -z "$runs" ] || [ $secs_given = 1 ] && echo "$secs s")), log $log" >&2
  rc=0
  $OUT/fuzz_$t "${args[@]}" $corpus >"$log" 2>&1 || rc=$?
  last=$(grep -E '^#[0-9]+.*(cov|exec/s)' "$log" | tail -1 || true)
  if [ $keep_going = 1 ]; then  # fork mode: the last status line, "#N: cov: .. exec/s .. time: Ts"
    execs=$(grep -oP '^#\K[0-9]+' <<<"$last" || echo 0)
    t_s=$(grep -oP ' time: \K[0-9]+' <<<"$last" || echo 0)
    eps=$( [ "${t_s:-0}" -gt 0 ] && echo $((execs / t_s)) || echo "?")
  else
    execs=$(grep -oP 'stat::number_of_executed_units:\s+\K[0-9]+' "$log" | tail -1 || true)
    eps=$(grep -oP 'stat::average_exec_per_sec:\s+\K[0-9]+' "$log" | tail -1 || true)
    [ -n "$execs" ] || execs=$(grep -oP '^#\K[0-9]+' <<<"$last" || echo "?")
    [ -n "$eps" ] || eps=$(grep -oP 'exec/s: \K[0-9]+' <<<"$last" || echo "?")
  fi
  cov=$(grep -oP 'cov: \K[0-9]+' <<<"$last" || echo "?")
  ft=$(grep -oP 'ft: \K[0-9]+' <<<"$last" || echo "?")
  corp=$(ls $corpus | wc -l)
  new=$(( $(findings_now) - before ))
  slow=$(( $(ls $findings | grep -c '^slow-unit-' || true) - slow_before ))
  found=""
  if [ $rc != 0 ] || [ $new -gt 0 ]; then
    status=1
    found="$new new in $findings: $(grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|FINDING|terminate called' "$log" | cut -c1-150)"
  fi
  line=$(printf '%-22s execs %-9s exec/s %-6s cov %-5s ft %-6s corpus %-5s findings %s%s' fuzz_$t "$execs" "$eps" "$cov" "$ft" "$corp" "${found:-none}" "$( [ "$slow" -gt 0 ] && echo " ($slow slow units, not counted: $findings/slow-unit-*)")")
  echo "$line" >&2
  echo "$line" >$OUT/summary-$t
  # Inside scripts/test.sh: one test per target in the whole run's counts (scripts/lib-suite.sh).
  if [ -n "${MIMI_SUITE_COUNTS:-}" ]; then
    [ -n "$found" ] && echo "0 1 0 fuzz_$t" >>"$MIMI_SUITE_COUNTS" || echo "1 0 0 fuzz_$t" >>"$MIMI_SUITE_COUNTS"
  fi
  [ -z "$found" ]
}

# One fuzzer per core (MIMI_JOBS, default 2; libFuzzer runs on one thread), so a smoke run of
# every target takes half the time; the summary keeps the targets' order.
jobs=${MIMI_JOBS:-2}
status=0 pids=()
for t in "${targets[@]}"; do
  rm -f $OUT/summary-$t
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done  # statuses: collected below
  fuzz_one "$t" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
echo
for t in "${targets[@]}"; do cat $OUT/summary-$t 2>/dev/null || { echo "fuzz_$t: no summary"; status=1; }; done
exit $status
