#!/usr/bin/env bash
# Engine test: `mimi dataset` on a real Slurm. Starts munged, slurmctld and slurmd as a one-node
# cluster on localhost (a generated slurm.conf in a temporary directory), submits the shards of a
# plan as `sbatch --array=0-5` with `--shard auto`, waits with squeue, then resubmits what
# `status --todo --format ranges` prints (6-7) the way docs/DATASETS.md does; then status shows
# all done and verify passes; then, the plan replaced with --force, status refuses the output as
# the workers do (nothing to submit). The daemons are stopped by their pid files at the end.
# Usage: slurm_test.sh MIMI WEIGHTS. Exit 77 (skipped, with the reason) when not root or when the
# daemons cannot start here.
set -euo pipefail
MIMI=$(realpath "$1")
export MIMI_WEIGHTS=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; for f in "$T"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "the Slurm daemons need root (SlurmUser=root); run as root to test"
for c in munged slurmctld slurmd sbatch squeue scontrol python3; do
  command -v "$c" >/dev/null || skip "$c is not installed (Debian packages slurm-wlm, munge; scripts/install-deps.sh)"
done
[ -r /etc/munge/munge.key ] || skip "no /etc/munge/munge.key (the munge package makes it)"

T=$(mktemp -d "${TMPDIR:-/tmp}/mimi-ds-slurm.XXXXXX")
chmod 755 "$T"
stop() {
  for d in slurmd slurmctld munged; do
    [ -f "$T/$d.pid" ] && kill "$(cat "$T/$d.pid")" 2>/dev/null || true
  done
  sleep 1
  rm -rf "$T"
}
trap stop EXIT
mkdir -p "$T/munge" "$T/state" "$T/spool" "$T/work"
H=$(hostname -s)
# Ports away from the defaults (6817/6818), so a real cluster on this machine is not disturbed.
PORT=$((17000 + RANDOM % 2000))
cat > "$T/slurm.conf" <<CONF
ClusterName=mimitest
SlurmctldHost=$H
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/filetxt
JobCompLoc=$T/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=$H CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$T/slurm.conf
munged --socket="$T/munge/munge.socket" --pid-file="$T/munged.pid" --log-file="$T/munged.log" \
  --seed-file="$T/munge.seed" --key-file=/etc/munge/munge.key --force 2> "$T/munged.err" ||
  skip "munged does not start here: $(cat "$T/munged.err")"
slurmctld -f "$T/slurm.conf" 2> "$T/slurmctld.err" || skip "slurmctld does not start here: $(cat "$T/slurmctld.err")"
slurmd -f "$T/slurm.conf" 2> "$T/slurmd.err" || skip "slurmd does not start here: $(cat "$T/slurmd.err")"
for _ in $(seq 100); do
  sinfo -h -o '%t' 2>/dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o '%t' | grep -q idle || skip "the one-node cluster did not come up: $(tail -3 "$T/slurmd.log" 2>/dev/null)"

cd "$T/work"
python3 "$HERE/gen_clips.py" clips manifest.jsonl  # the corpus of parallel_test.sh
"$MIMI" dataset plan manifest.jsonl -o plan --shards 8 -q

# Waits for a job array to leave the queue (squeue), then checks every task completed with exit 0
# (sacct when accounting is on; else the jobcomp/filetxt record).
wait_array() {
  local job=$1 n=$2
  for _ in $(seq 1500); do
    [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
    sleep 0.2
  done
  [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] || fail "job $job still queued after 300 s"
  local ok
  if sacct -n -X -j "$job" -o State > sacct.txt 2>/dev/null; then
    ok=$(grep -c COMPLETED sacct.txt || true)
  else
    ok=$(grep "ArrayJobId=$job " "$T/jobcomp.txt" | grep 'JobState=COMPLETED' | grep -c 'ExitCode=0:0' || true)
  fi
  [ "$ok" -eq "$n" ] || fail "job $job: $ok of $n array tasks completed with exit 0"
}

JOB=$(sbatch --parsable --array=0-5 --output="$T/work/task-%a.log" \
  --wrap "exec '$MIMI' dataset encode --plan plan --shard auto -o out --threads 1")
wait_array "$JOB" 6
TODO=$("$MIMI" dataset status out --todo --format ranges)
[ "$TODO" = "6-7" ] || fail "status --todo --format ranges printed '$TODO', expected 6-7"
# The resubmission of what is left: the array ids are the shard indices.
JOB2=$(sbatch --parsable --array="$TODO" --output="$T/work/task-%a.log" \
  --wrap "exec '$MIMI' dataset encode --plan plan --shard \$SLURM_ARRAY_TASK_ID/8 -o out --threads 1")
wait_array "$JOB2" 2
"$MIMI" dataset status out
[ -z "$("$MIMI" dataset status out --todo --format ranges)" ] || fail "shards still unfinished"
"$MIMI" dataset status out | tail -1 | grep -q '8 done' || fail "status does not show 8 done"
"$MIMI" dataset verify out || fail "verify failed"
# The plan replaced under the same folder (plan --force): status refuses the old output as every
# worker would (exit 2, nothing on stdout), so the recipe submits no array whose every task fails.
"$MIMI" dataset plan manifest.jsonl -o plan --shards 5 -f -q
set +e
TODO=$("$MIMI" dataset status out --todo --format ranges 2>"$T/status.err")
RC=$?
"$MIMI" dataset encode --plan plan --shard 0/5 -o out -q 2>"$T/encode.err"
ERC=$?
set -e
[ "$RC" = 2 ] && [ -z "$TODO" ] || fail "status of an output of a replaced plan: exit $RC, printed '$TODO'"
[ "$ERC" = 2 ] || fail "a worker on an output of a replaced plan: exit $ERC"
[ "$(cat "$T/status.err")" = "$(cat "$T/encode.err")" ] || fail "status and the worker refuse differently"
echo "PASS"
