#!/bin/bash
# matrix (slurm backend): one array task = one repeat of one cell, found in the manifest.
#SBATCH --job-name="matrix-env $(touch /tmp/pwned) `touch /tmp/pwned` 'q' \"d\" ;touch /tmp/pwned #c \\ %j"
#SBATCH --comment="matrix run 20260101-000000-abcdef"
#SBATCH --array=0-11
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --time=00:30:00
#SBATCH --chdir="/shared/results $(touch /tmp/pwned) `touch /tmp/pwned` 'q' \"d\" ;touch /tmp/pwned #c \\ %j/run"
#SBATCH --output=logs/%A_%a.out
#SBATCH --partition="gpu $(touch /tmp/pwned) `touch /tmp/pwned` 'q' \"d\" ;touch /tmp/pwned #c \\ %j"
#SBATCH --account="acct'x"
#SBATCH --qos="q\"x"
#SBATCH --cpus-per-task=2
#SBATCH --mem=16G
#SBATCH --gres=gpu:1
#SBATCH --constraint="a100&$(touch /tmp/pwned) `touch /tmp/pwned` 'q' \"d\" ;touch /tmp/pwned #c \\ %j"
#SBATCH --exclusive
#SBATCH --reservation=maint

RESULTS='/shared/results $(touch /tmp/pwned) `touch /tmp/pwned` '"'"'q'"'"' "d" ;touch /tmp/pwned #c \ %j/run'
MANIFEST=manifest-001.tsv
BENCH_NAME=bench-0123456789ab.pyz
PYTHON='/opt/py $(touch /tmp/pwned) `touch /tmp/pwned` '"'"'q'"'"' "d" ;touch /tmp/pwned #c \ %j/bin/python3'
NTASKS_PER_NODE=4
cd "$RESULTS" || { echo "matrix: cannot enter the results directory $RESULTS" >&2; exit 97; }

# This array task's line of the manifest: task id, then the benchmark's arguments, tab-separated.
line="$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" "$MANIFEST")"
IFS=$'\t' read -r -a fields <<< "$line"
MATRIX_TASK="${fields[0]:-}"
case "$MATRIX_TASK" in
    ''|*[!A-Za-z0-9_.-]*) echo "matrix: no valid task at index $SLURM_ARRAY_TASK_ID of $MANIFEST" >&2; exit 98 ;;
esac
args=("${fields[@]:1}")
export MATRIX_TASK
mkdir -p work out

# Publish stdin as out/NAME: written in a new private folder, then renamed over the name (mv -T: a link
# planted there is replaced, never written through or moved into), so the controller sees a whole file or none.
publish() {
    local dir rc
    dir="$(mktemp -d "out/.$MATRIX_TASK.XXXXXX")" || return 1
    cat > "$dir/file" && mv -fT "$dir/file" "out/$1"
    rc=$?
    rm -rf "$dir"
    return "$rc"
}

# The environment's variables (env: in matrix.yaml).
export HOSTILE='$(touch /tmp/pwned) `touch /tmp/pwned` '"'"'q'"'"' "d" ;touch /tmp/pwned #c \ %j'
export NCCL_DEBUG=INFO

# Setup lines, run as written (shell by design: module load, source venv/bin/activate).
module load pytorch/1.13

# torch.distributed env://: the first node of the job is the master, the port follows the job id.
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | head -n1)"
export MASTER_ADDR="${MASTER_ADDR:-$(hostname)}"
export MASTER_PORT="$((15000 + SLURM_JOB_ID % 20000))"
export WORLD_SIZE="$((SLURM_JOB_NUM_NODES * NTASKS_PER_NODE))"
export PYTHONUNBUFFERED=1

# One bench process per GPU (per task slot) on every node; each rank writes its own files.
started="$(date +%s.%N)"
srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node="$NTASKS_PER_NODE" \
    bash -c 'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" LOCAL_WORLD_SIZE="$SLURM_NTASKS_PER_NODE"
rm -f "work/$MATRIX_TASK.rank$RANK".out "work/$MATRIX_TASK.rank$RANK".log "work/$MATRIX_TASK.rank$RANK".rc
set -o noclobber  # new files only: a link planted at these names makes the rank fail, never written through
# The rank dies with this shell (runner/bench/tether.py): a step ended by its time limit or scancel cannot
# leave it computing on the node once this shell is gone, whatever proctrack plugin the cluster runs.
export MATRIX_TETHER="$$ $(readlink /proc/self/ns/pid 2>/dev/null)"
"$@" >"work/$MATRIX_TASK.rank$RANK.out" 2>"work/$MATRIX_TASK.rank$RANK.log"
rc=$?
echo "$rc" >"work/$MATRIX_TASK.rank$RANK.rc"
exit "$rc"' matrix-rank "$PYTHON" "$RESULTS/$BENCH_NAME" "${args[@]}"
srun_rc=$?
finished="$(date +%s.%N)"
rc="$(cat "work/$MATRIX_TASK.rank0.rc" 2>/dev/null)"
rc="${rc:-$srun_rc}"

# Publish atomically: stdout and stderr first, then the marker that says both are complete.
mv -fT "work/$MATRIX_TASK.rank0.out" "out/$MATRIX_TASK.out" 2>/dev/null || publish "$MATRIX_TASK.out" < /dev/null
{
    cat "work/$MATRIX_TASK.rank0.log" 2>/dev/null
    for f in "work/$MATRIX_TASK".rank*.log; do
        [ -e "$f" ] && [ "$f" != "work/$MATRIX_TASK.rank0.log" ] || continue
        echo "--- ${f#work/} ---"
        tail -c 1500 "$f"
    done
} | publish "$MATRIX_TASK.err"
printf '{"schema": 1, "task": "%s", "returncode": %d, "srun_returncode": %d, "job_id": "%s", "started_at": %s, "finished_at": %s}\n' \
    "$MATRIX_TASK" "$rc" "$srun_rc" "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}" "$started" "$finished" \
    | publish "$MATRIX_TASK.done"
exit "$rc"
