#!/usr/bin/env bash
# The GPU check's device run: the one prepared script for a call of a lent GPU machine (docs/gpu-check.md).
#
#   PREFLIGHT=1 DEVICE_BUDGET_S=<budget_left_s> bash benchmarks/gpu_device_run.sh   # HERE, before the call
#   POPTUNE_COMMIT=<sha> CUDA_TESTS=<files|none> DEVICE_BUDGET_S=<left> bash benchmarks/gpu_device_run.sh  # the call
#   DRY_RUN=1 OUT=/tmp/dry bash benchmarks/gpu_device_run.sh             # every stage's code path on CPU stand-ins
#
# The preflight (here) refuses a working tree with uncommitted changes to tracked files (the device run must
# measure a commit, not "+dirty"), and prints the call's command: the commit it measures (POPTUNE_COMMIT) and the
# CUDA test files whose code changed since the commit they last passed at (CUDA_TESTS_PASSED_AT=<sha>; without it,
# all; "none" where nothing they cover changed).
#
# DEVICE_BUDGET_S is the budget_left_s the device tool's `status` reports before the call; the script refuses to
# run without it (issue 59). Every call pays a fresh machine's start-up (STARTUP_S: what the last run measured,
# issue 89) and the transfers (MARGIN_S). One call is sized to what is left: RUN_SECONDS = budget - STARTUP_S -
# MARGIN_S, at most 560 s (a command runs at most 600 s; timeout_s = RUN_SECONDS + 40). Only where the budget holds
# the whole plan (NEED_S: the stages admitted with their margins, the steps before them, the CUDA tests) AND a
# second start-up and a short rerun (RERUN_MIN_S) is the run shortened to keep that rerun. Under MIN_RUN_S the
# script refuses (the call would be wasted).
# A rerun: RESUME_FROM=<the previous call's gpu-check/gpu-check.json, copied into the tree> copies it into $OUT; the
# check keeps the rows it measured at the same commit on the same card, and measures the rest (every row, after a
# new commit or on another card).
#
# Imports: the device machine installs nothing and copies the working tree only, so the repository root goes on
# PYTHONPATH (after the carried wheels' /tmp/site) and the check runs as `python -m poptune gpu-check`. Torch is
# imported twice: once by the versions step (the version preflight and the CUDA probe in one process) and once by
# the check. The check's deadline is set from this script's start (--deadline), so the outer timeout and the
# check's admission count the same seconds. Everything goes under $OUT as it happens (python -u, tee):
# device-run.log, versions.txt, gpu-check/ (json and md after every row and stage), cuda-tests.txt, summary.md.
# Where a GPU is there (nvidia-smi lists one, or /dev/nvidia0 or /proc/driver/nvidia/gpus/* exists) but torch sees
# no CUDA, the run FAILs (it is not turned into a dry run).

set -uo pipefail
PY=${PYTHON:-python3}
STARTUP_S=${STARTUP_S:-30}       # a fresh machine's start-up as the last run measured it: held 242 s, ran 211 s
MARGIN_S=${MARGIN_S:-20}         # transfers, the give-back
CALL_LIMIT_S=560                 # a command runs at most 600 s; the call's timeout_s is RUN_SECONDS + 40
NEED_S=520                       # the plan admitted with its margins + install + versions + grace + CUDA tests
RERUN_MIN_S=120                  # the shortest rerun worth a second start-up
MIN_RUN_S=150                    # under this the call would measure nothing: refused
TESTS_SECONDS=60                 # allowance of the CUDA tests: ~15 energy blocks, imports, 4 tiny models' likelihood pairs
GRACE_SECONDS=10                 # the check's last write after its deadline
NVIDIA_DEV=${NVIDIA_DEV:-/dev/nvidia0}
NVIDIA_PROC=${NVIDIA_PROC:-/proc/driver/nvidia/gpus}
if [ -z "${DEVICE_BUDGET_S:-}" ]; then
    if [ "${DRY_RUN:-0}" = 1 ]; then DEVICE_BUDGET_S=900; else
        echo "REFUSED: set DEVICE_BUDGET_S to the budget_left_s the device tool's status reports" >&2; exit 2
    fi
fi
avail=$((DEVICE_BUDGET_S - STARTUP_S - MARGIN_S))
if [ "$avail" -ge $((NEED_S + STARTUP_S + MARGIN_S + RERUN_MIN_S)) ]; then
    RUN_SECONDS=$((avail - STARTUP_S - MARGIN_S - RERUN_MIN_S)); RERUN_ROOM=yes
else
    RUN_SECONDS=$avail; RERUN_ROOM=no
fi
[ "$RUN_SECONDS" -gt "$CALL_LIMIT_S" ] && RUN_SECONDS=$CALL_LIMIT_S
RUN_SECONDS=${RUN_OVERRIDE_S:-$RUN_SECONDS}
echo "run of at most ${RUN_SECONDS} s (device budget ${DEVICE_BUDGET_S} s, start-up ${STARTUP_S} s, room for a rerun: ${RERUN_ROOM}; timeout_s $((RUN_SECONDS + 40)))"
if [ "$RUN_SECONDS" -lt "$MIN_RUN_S" ]; then
    echo "REFUSED: ${RUN_SECONDS} s < ${MIN_RUN_S} s: too little device time left for a call that measures anything" >&2
    exit 2
fi
# The wheels that must travel (carry=[".whl"]): the set that ran on the H200 image on 2026-12-04 (docs/gpu-check.md).
# transformers 5.24+ checks huggingface-hub >= 2.4 at import and the image has 1.33, so the hub travels too, with
# what it imports that the image lacks or has too old (httpx2, httpcore2, truststore, click, hf-xet); regex and
# accelerate at versions known to import with them.
WHEELS="transformers==5.25.0 huggingface_hub==2.4.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 click==8.5.1
hf_xet==1.8.0 regex==2026.11.19 accelerate==1.16.0"
WHEELS_DIR=${WHEELS_DIR:-.whl}  # what the call carries; a test points it elsewhere
# Each CUDA test file and the code it covers: run on the device only where that code changed since the commit the
# tests last passed at (issue 89: ~47 s of a call otherwise spent on tests that already passed).
CUDA_TEST_FILES="tests/measure/test_cuda.py:poptune/measure,poptune/engine,poptune/kv,poptune/models,tests/measure/test_cuda.py
tests/evaluate/test_answers_shared.py:poptune/evaluate,poptune/engine,poptune/kv,poptune/models,tests/evaluate/test_answers_shared.py"
cuda_tests_changed() {  # cuda_tests_changed [SHA]: the test files whose covered code changed since SHA (all without)
    local since=$1 out="" file paths
    for entry in $CUDA_TEST_FILES; do
        file=${entry%%:*}; paths=${entry#*:}
        if [ -z "$since" ] || ! git diff --quiet "$since" HEAD -- ${paths//,/ } 2>/dev/null; then out="$out $file"; fi
    done
    out=${out# }; echo "${out:-none}"
}
if [ "${PREFLIGHT:-0}" = 1 ]; then  # on this machine, before the call: what must travel with it
    missing=""
    for pin in $WHEELS; do
        compgen -G "$WHEELS_DIR/${pin%%==*}-${pin##*==}-*.whl" > /dev/null || missing="$missing $pin"
    done
    if [ -n "$missing" ]; then
        echo "REFUSED: $WHEELS_DIR/ lacks$missing: the device image has transformers 5.17, huggingface_hub 1.33 and no network. Here:" >&2
        echo "  echo /.whl/ >> .git/info/exclude; python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl$missing" >&2
        exit 1
    fi
    if [ -n "$(git status --porcelain --untracked-files=no -- . ':!leaderboards' ':!studies' 2>/dev/null)" ]; then
        echo "REFUSED: uncommitted changes to tracked files: commit them first (the device run measures a commit)" >&2
        git status --short --untracked-files=no -- . ':!leaderboards' ':!studies' >&2
        exit 1
    fi
    commit=$(git rev-parse HEAD)
    tests=$(cuda_tests_changed "${CUDA_TESTS_PASSED_AT:-}")
    echo "PREFLIGHT PASS: call run with carry=[\".whl\"], timeout_s=$((RUN_SECONDS + 40)), command \"POPTUNE_COMMIT=${commit} CUDA_TESTS=\\\"${tests}\\\" DEVICE_BUDGET_S=${DEVICE_BUDGET_S} bash benchmarks/gpu_device_run.sh\""
    exit 0
fi
: "${OUT:?set OUT to the folder the results go to}"
START_EPOCH=$(date +%s)
mkdir -p "$OUT"
exec 3>&1 4>&2
exec > >(tee -a "$OUT/device-run.log") 2>&1
TEE_PID=$!
finish() {  # hand the log's tail to tee and wait for it to be written before the call returns
    exec 1>&3 2>&4
    for _ in $(seq 50); do kill -0 "$TEE_PID" 2>/dev/null || break; sleep 0.1; done
}
trap finish EXIT
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
START=$SECONDS
SUMMARY="$OUT/summary.md"
printf '# GPU device run\n\n| step | status | seconds | expected |\n|---|---|---|---|\n' > "$SUMMARY"

step() {  # step NAME STATUS STARTED EXPECTED: one summary line, written at once
    printf '| %s | %s | %s | %s |\n' "$1" "$2" "$((SECONDS - $3))" "$4" >> "$SUMMARY"
    echo "[$(date +%H:%M:%S)] $1: $2 ($((SECONDS - $3)) s, expected $4)"
}

gpu_there() {  # a GPU on this machine, whatever torch says: nvidia-smi, the device node or the driver's list
    { command -v nvidia-smi > /dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; } || [ -e "$NVIDIA_DEV" ] \
        || [ -n "$(ls -A "$NVIDIA_PROC" 2>/dev/null)" ]
}

t=$SECONDS
if compgen -G ".whl/*.whl" > /dev/null; then
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl; then status=PASS; else status=FAIL; fi
    step install "$status" "$t" "seconds (local wheels, no network, no byte-compiling)"
else
    step install "SKIP (no .whl/ carried)" "$t" "-"
fi
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"

t=$SECONDS  # the version preflight and the CUDA probe in one process (one cold import of torch)
PROBE='import sys
from poptune.cli import main
rc = main(["gpu-check", "--versions"])
import torch
print(f"PROBE torch {torch.__version__} CUDA {torch.version.cuda} available {torch.cuda.is_available()}")
sys.exit(rc)'
if "$PY" -u -c "$PROBE" | tee "$OUT/versions.txt"; then
    step versions PASS "$t" "~10 s (package metadata, the CUDA probe)"
else
    step versions FAIL "$t" "~10 s (package metadata, the CUDA probe)"
    echo "FAIL versions: see versions.txt; the check needs them" | tee -a "$SUMMARY"
    exit 1
fi

DRY=${DRY_RUN:-0}
if [ "$DRY" != 1 ] && ! grep -q '^PROBE .* available True$' "$OUT/versions.txt"; then
    if gpu_there; then
        step gpu-check "FAIL (a GPU is there but torch sees no CUDA)" "$t" "-"
        { nvidia-smi -L 2>/dev/null; ls -d "$NVIDIA_DEV" "$NVIDIA_PROC"/* 2>/dev/null; grep '^PROBE' "$OUT/versions.txt"; } \
            | tee -a "$SUMMARY"
        exit 1
    fi
    DRY=1
    echo "no GPU here (no nvidia-smi listing, no $NVIDIA_DEV, no $NVIDIA_PROC) and no CUDA: a dry run"
fi

mkdir -p "$OUT/gpu-check"
if [ -n "${RESUME_FROM:-}" ] && [ "$DRY" != 1 ]; then
    cp "$RESUME_FROM" "$OUT/gpu-check/gpu-check.json" && echo "resuming from $RESUME_FROM"
fi
t=$SECONDS
deadline=$((START_EPOCH + RUN_SECONDS - GRACE_SECONDS))  # from this script's start, as the call's timeout counts
budget=$((deadline - $(date +%s)))
args=(--out "$OUT/gpu-check" --deadline "$deadline")
[ "$DRY" = 1 ] && args+=(--dry-run --device cpu)
timeout $((budget + GRACE_SECONDS)) "$PY" -u -m poptune gpu-check "${args[@]}"
rc=$?
case $rc in
    0) status=PASS ;;
    1) status="FAIL (see the check's FAIL lines)" ;;
    124) status="FAIL (killed at the outer time limit)" ;;
    *) status="FAIL (exit $rc)" ;;
esac
[ "$DRY" = 1 ] && [ $rc = 0 ] && status="PASS (dry run: stand-in models)"
step gpu-check "$status" "$t" "at most ${budget} s (--deadline; each stage's own estimate in gpu-check.md)"

t=$SECONDS
left=$((RUN_SECONDS - (SECONDS - START)))
CUDA_TESTS=${CUDA_TESTS:-tests/measure/test_cuda.py tests/evaluate/test_answers_shared.py}
if [ "$CUDA_TESTS" = none ]; then
    step cuda-tests "SKIP (nothing they cover changed since they last passed: the preflight's CUDA_TESTS)" "$t" "0 s"
elif [ "$left" -ge "$TESTS_SECONDS" ]; then
    # shellcheck disable=SC2086  # a list of test files
    timeout "$left" "$PY" -u -m pytest -m cuda -q -p no:cacheprovider $CUDA_TESTS 2>&1 \
        | tee "$OUT/cuda-tests.txt"
    trc=${PIPESTATUS[0]}
    if [ "$trc" = 0 ] || [ "$trc" = 5 ]; then status=PASS; else status="FAIL (exit $trc)"; fi
    step cuda-tests "$status" "$t" "at most ${TESTS_SECONDS} s"
else
    step cuda-tests "SKIP (${left} s left < ${TESTS_SECONDS} s: a rerun runs them)" "$t" "${TESTS_SECONDS} s"
fi

{
    echo
    echo "Total $((SECONDS - START)) s of at most ${RUN_SECONDS} s. $(grep -m1 '^Board: ' "$OUT/gpu-check/gpu-check.md" 2>/dev/null)"
    echo
    echo "The check's status lines:"
    echo
    echo '```'
    sed -n '/^```$/,/^```$/p' "$OUT/gpu-check/gpu-check.md" 2>/dev/null | sed '/^```$/d'
    echo '```'
} >> "$SUMMARY"
echo "summary: $SUMMARY"
[ $rc = 0 ]
