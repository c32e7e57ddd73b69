#!/usr/bin/env bash
# Engine test: `mimi dataset` run by GNU parallel. A corpus of 37 generated items (0.1 s - 2 min,
# 16/24/44.1/48 kHz, stereo, a segment, two corrupt files) planned into 8 shards and encoded by
# `parallel -j2`; one worker is SIGKILLed mid-shard and the job is rerun with --resume-failed.
# Then: all shards done, the killed shard byte-identical to an uninterrupted run, every item's
# codes equal to `mimi encode`, the corrupt files in the errors files, status empty, verify ok.
# Usage: parallel_test.sh MIMI WEIGHTS. Exit 77 (skipped) without GNU parallel or python3.
set -euo pipefail
MIMI=$(realpath "$1")
export MIMI_WEIGHTS=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
if ! command -v parallel >/dev/null || ! parallel --version 2>/dev/null | grep -q 'GNU parallel'; then
  echo "SKIP: GNU parallel is not installed (Debian package 'parallel'; scripts/install-deps.sh installs it)"
  exit 77
fi
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to generate the clips"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/mimi-ds-parallel.XXXXXX")
PAR=""
# On any exit, stop GNU parallel's workers first: removing the directory under running workers
# fails ("Directory not empty") and leaves them writing into a deleted tree.
cleanup() { [ -z "$PAR" ] || { kill "$PAR" 2>/dev/null; wait "$PAR" 2>/dev/null; } || true; rm -rf "$T"; }
trap cleanup EXIT
cd "$T"
fail() { echo "FAIL: $*"; exit 1; }

python3 "$HERE/gen_clips.py" clips manifest.jsonl
"$MIMI" dataset plan manifest.jsonl -o plan --shards 8 -q
WORKER="echo \$\$ > pid.{}; exec '$MIMI' dataset encode -q --plan plan --shard {}/8 -o out --threads 1 --sync-items 1"

# First run: two workers at a time; one of them is killed without warning while mid-shard.
parallel -j2 --joblog jobs.log "$WORKER" ::: 0 1 2 3 4 5 6 7 > parallel1.log 2>&1 &
PAR=$!
K=""
for _ in $(seq 6000); do
  for s in 0 1 2 3 4 5 6 7; do
    j=$(printf 'out/shards/shard-%05d.journal' "$s")
    [ -f "$j" ] && [ -f "pid.$s" ] && [ ! -f "${j%.journal}.done" ] || continue
    # A worker that finishes its shard between the test above and this read removes the journal
    # (the .done file is its record): skip the shard then, it cannot be killed mid-shard any more.
    lines=$(wc -l 2>/dev/null < "$j") || continue  # (2> first: it must apply before < fails)
    # mid-shard: two items journaled (after the begin line) and at least two still to do (the
    # longest come last, so the worker cannot reach the end of the shard before the kill lands)
    done_items=$((lines - 1))
    planned=$(wc -l < "$(printf 'plan/shard-%05d.jsonl' "$s")")
    if [ "$done_items" -ge 2 ] && [ "$done_items" -le $((planned - 2)) ]; then
      kill -9 "$(cat "pid.$s")" 2>/dev/null && K=$s && break 2
    fi
  done
  sleep 0.01
done
[ -n "$K" ] || fail "no worker could be killed mid-shard"
wait "$PAR" && fail "parallel reported success although worker $K was killed" || true
PAR=""
SK=$(printf 'shard-%05d' "$K")
echo "killed the worker of shard $K after $(($(wc -l < "out/shards/$SK.journal") - 1)) journaled items"
[ -f "out/shards/$SK.done" ] && fail "the killed shard is marked done"
[ -f "out/shards/$SK.tar" ] && fail "the killed shard has a final tar"
[ -f "out/shards/$SK.tar.partial" ] || fail "the killed shard left no partial tar"
"$MIMI" dataset status out
TODO=$("$MIMI" dataset status out --todo --format ranges)
echo "todo after the first run: $TODO"
echo "$TODO" | grep -qw "$K" || fail "status does not list shard $K as unfinished"

# The rerun: GNU parallel reruns exactly the failed job; the worker resumes from the journal.
parallel -j2 --resume-failed --joblog jobs.log "$WORKER" ::: 0 1 2 3 4 5 6 7 > parallel2.log 2>&1 ||
  { cat parallel2.log; fail "the rerun failed"; }
[ "$(wc -l < jobs.log)" -eq 10 ] || fail "expected 8 + 1 jobs in the joblog, got $(($(wc -l < jobs.log) - 1))"
[ -z "$("$MIMI" dataset status out --todo --format ranges)" ] || fail "shards still unfinished"
"$MIMI" dataset status out | tail -1 | grep -q '8 done' || fail "status does not show 8 done"

# The interrupted shard equals an uninterrupted run of it.
"$MIMI" dataset encode -q --plan plan --shard "$K/8" -o ref
cmp "out/shards/$SK.tar" "ref/shards/$SK.tar" || fail "the resumed shard differs from an uninterrupted run"
cmp "out/shards/$SK.index.jsonl" "ref/shards/$SK.index.jsonl" || fail "the resumed index differs"
echo "shard $K after the kill is byte-identical to an uninterrupted run"

# The corrupt files are in the errors files, and nothing else is.
cat out/shards/*.errors.jsonl > errors.jsonl
grep -q '"key":"corrupt-garbage"' errors.jsonl || fail "corrupt-garbage is not in the errors files"
grep -q '"key":"corrupt-nodata"' errors.jsonl || fail "corrupt-nodata is not in the errors files"
[ "$(wc -l < errors.jsonl)" -eq 2 ] || fail "expected 2 errors, got $(wc -l < errors.jsonl)"

# Every item's codes equal `mimi encode` of the same audio (the segment: of its own file).
mkdir -p enc
python3 - manifest.jsonl > encode-list.txt <<'PY'
import json, os, sys, re
for line in open(sys.argv[1]):
    e = json.loads(line)
    if 'corrupt' in e['path']: continue
    key = e.get('id') or os.path.splitext(e['path'])[0]
    src = 'clips/segment-ref.wav.ref' if 'start' in e else e['path']
    print(src, re.sub(r'[^A-Za-z0-9_\-/+=,@]', '_', key).replace('/', '__'))
PY
while read -r src key; do
  if [ "${src##*.}" = ref ]; then cp "$src" "enc/$key.wav"; src="enc/$key.wav"; fi
  "$MIMI" encode -q "$src" -o "enc/$key.npy"
done < encode-list.txt
python3 "$HERE/compare_codes.py" out enc || fail "codes differ from mimi encode"

"$MIMI" dataset verify out || fail "verify failed"
echo "PASS"
