#!/bin/bash
# matrix (slurm backend): one array task = one repeat of one cell, found in the manifest.
#SBATCH --job-name=matrix-podman-env
#SBATCH --comment="matrix run r1"
#SBATCH --array=0-2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --time=00:30:00
#SBATCH --chdir="/shared/matrix runs/r1"
#SBATCH --output=logs/%A_%a.out
#SBATCH --partition=gpu
#SBATCH --gres=gpu:1

RESULTS='/shared/matrix runs/r1'
MANIFEST=manifest-001.tsv
BENCH_NAME=bench-0123456789ab.pyz
PYTHON=python3
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
export NCCL_DEBUG=WARN

# Setup lines, run as written (shell by design: module load, source venv/bin/activate).

# torch.distributed env://: the first node of the job is the master, the port follows the job id.
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | head -n1)"
export MASTER_ADDR="${MASTER_ADDR:-$(hostname)}"
export MASTER_PORT="$((15000 + SLURM_JOB_ID % 20000))"
export WORLD_SIZE="$((SLURM_JOB_NUM_NODES * NTASKS_PER_NODE))"
export PYTHONUNBUFFERED=1

# The container runtime (podman; its command line follows podman-run(1) of Podman 4.3 (GPUs as CDI devices: --device nvidia.com/gpu=all)).
# What it needs is checked once per job on every node before any rank starts: a node that lacks it
# makes this task not_started with its reason; the facts it records (the runtime's version, the
# image's identity) travel with the result (out/TASK.runtime).
export USER="${USER:-$(id -un)}"
IFS= read -r -d '' CHECK <<'MATRIX_CHECK' || true
out="$1.${SLURM_NODEID:-0}"
: > "$out" || exit 1
fact() { local v="${2//$'\n'/ }"; printf '%s\t%s\n' "$1" "${v//$'\t'/ }" >> "$out"; }
fail() { fact error "$1"; exit 1; }
need_runtime() {  # need_runtime WHAT HINT: the runtime's command is here; record its version
    command -v "$RUNTIME" >/dev/null 2>&1 || fail "$1 ($RUNTIME) is not on PATH: $2"
    fact runtime_version "$("$RUNTIME" --version 2>&1 | head -n1)"
}
file_image() {  # a file or directory image: here and readable; the controller's hash while it is unchanged
    [ -e "$IMAGE" ] || fail "image $IMAGE does not exist"
    [ -r "$IMAGE" ] || fail "image $IMAGE cannot be read"
    if [ -z "$IMAGE_SHA256" ]; then fact image_identity "$IMAGE_PROBLEM"; return 0; fi
    local now
    now="$(stat -L -c '%s %Y' -- "$IMAGE")"
    if [ "$now" = "$IMAGE_STAT" ]; then
        fact image_sha256 "$IMAGE_SHA256"
        fact image_hash_of "$IMAGE_HASH_OF"
    else
        fact image_changed "size and time $now here, not $IMAGE_STAT as when it was hashed at submission"
    fi
}
try_start() {  # try_start WORDS...: start the container once, as a rank would, with `true` for the command
    local said
    said="$("$@" true 2>&1)" || fail "$RUNTIME cannot start a container of $IMAGE: $(printf '%s' "$said" | tail -n 3)"
}
fact node "$(hostname)"
RUNTIME=podman
IMAGE=nvcr.io/nvidia/pytorch:24.10-py3
need_runtime Podman 'install podman there, or set container.executable'
found="$("$RUNTIME" image inspect --format '{{.Id}} {{.Digest}}' "$IMAGE" 2>&1)" || fail "image $IMAGE is not in podman's image storage (${found##*: }): podman pull or podman load it on every node"
fact image_id "${found%% *}"
fact repo_digest "${found#* }"
try_start podman run --rm --pull=never --network=host --uts=host --ipc=host --label=matrix.run_id=r1 --timeout=1920 '--volume=/shared/matrix runs/r1:/shared/matrix runs/r1:ro' --volume=/shared/data:/data:ro '--workdir=/shared/matrix runs/r1' --env=RANK --env=LOCAL_RANK --env=LOCAL_WORLD_SIZE --env=WORLD_SIZE --env=MASTER_ADDR --env=MASTER_PORT --env=PYTHONUNBUFFERED --env=MATRIX_TASK --env=CUDA_VISIBLE_DEVICES '--env=SLURM_*' '--env=NCCL_*' '--env=GLOO_*' --env=NCCL_DEBUG --device=nvidia.com/gpu=all --shm-size=8g nvcr.io/nvidia/pytorch:24.10-py3

MATRIX_CHECK
rm -f "work/$MATRIX_TASK".check.*
srun --kill-on-bad-exit=0 --nodes=2 --ntasks-per-node=1 bash -c "$CHECK" matrix-check "work/$MATRIX_TASK.check"
check_rc=$?
cat "work/$MATRIX_TASK".check.* 2>/dev/null | publish "$MATRIX_TASK.runtime"
if [ "$check_rc" != 0 ]; then
    now="$(date +%s.%N)"
    publish "$MATRIX_TASK.out" < /dev/null
    publish "$MATRIX_TASK.err" < /dev/null
    printf '{"schema": 1, "task": "%s", "returncode": %d, "srun_returncode": %d, "check_returncode": %d, "job_id": "%s", "started_at": %s, "finished_at": %s}\n' \
        "$MATRIX_TASK" "$check_rc" "$check_rc" "$check_rc" "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}" "$now" "$now" \
        | publish "$MATRIX_TASK.done"
    exit "$check_rc"
fi

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
exit "$rc"' matrix-rank podman run --rm --pull=never --network=host --uts=host --ipc=host --label=matrix.run_id=r1 --timeout=1920 '--volume=/shared/matrix runs/r1:/shared/matrix runs/r1:ro' --volume=/shared/data:/data:ro '--workdir=/shared/matrix runs/r1' --env=RANK --env=LOCAL_RANK --env=LOCAL_WORLD_SIZE --env=WORLD_SIZE --env=MASTER_ADDR --env=MASTER_PORT --env=PYTHONUNBUFFERED --env=MATRIX_TASK --env=CUDA_VISIBLE_DEVICES '--env=SLURM_*' '--env=NCCL_*' '--env=GLOO_*' --env=NCCL_DEBUG --device=nvidia.com/gpu=all --shm-size=8g nvcr.io/nvidia/pytorch:24.10-py3 "$PYTHON" "$RESULTS/$BENCH_NAME" "${args[@]}"
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
