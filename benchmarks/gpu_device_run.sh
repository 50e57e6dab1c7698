#!/usr/bin/env bash
# The GPU check's device run: the one prepared script for a call of a lent GPU machine (docs/gpu-check.md).
#
#   DEVICE_BUDGET_S=900 bash benchmarks/gpu_device_run.sh                 # the full run; the device tool sets $OUT
#   RERUN=1 RESUME_FROM=leaderboards/gpu-check-h200/gpu-check.json DEVICE_BUDGET_S=<left> bash ...  # a short rerun
#   DRY_RUN=1 OUT=/tmp/dry bash benchmarks/gpu_device_run.sh             # every stage's code path on CPU stand-ins
#
# DEVICE_BUDGET_S is the budget_left_s the device tool's `status` reports before the call. The run is sized from it
# so that this call and one short rerun fit, each call paying a fresh machine's start-up (STARTUP_S, the worst of
# the 2-4 minutes): the full run gets RUN_SECONDS = budget - 2 x STARTUP_S - RERUN_SECONDS - MARGIN_S (capped at
# 300 s); a rerun gets what is left after one start-up and the margin (capped at RERUN_SECONDS). A rerun copies
# the first run's gpu-check.json (RESUME_FROM, brought back from $OUT and put in the working tree) into $OUT: the
# check keeps the stages that run finished and runs only the others, then the CUDA tests if their allowance fits.
#
# Imports: the device machine installs nothing and copies the working tree only, so the repository root goes on
# PYTHONPATH (after the carried wheels' /tmp/site) and the check runs as `python -m poptune gpu-check`.
# Order: the carried wheels (if any), the version preflight, the GPU check, then the CUDA tests if their allowance
# still fits. Everything goes under $OUT as it happens (python -u, tee): device-run.log, versions.txt, gpu-check/
# (json and md after every row and stage), cuda-tests.txt, summary.md. Where nvidia-smi lists a GPU but torch sees
# no CUDA, the run FAILs (it is not turned into a dry run).

set -uo pipefail
: "${OUT:?set OUT to the folder the results go to}"
PY=${PYTHON:-python3}
DEVICE_BUDGET_S=${DEVICE_BUDGET_S:-900}
STARTUP_S=${STARTUP_S:-240}      # a fresh machine's start-up, the worst seen (2-4 minutes), paid by every call
RERUN_SECONDS=${RERUN_SECONDS:-120}
MARGIN_S=${MARGIN_S:-20}         # transfers, the give-back
TESTS_SECONDS=60                 # allowance of the CUDA tests (tests/measure/test_cuda.py): ~15 energy blocks, imports
GRACE_SECONDS=10                 # the check's last write after its budget
if [ "${RERUN:-0}" = 1 ]; then
    RUN_SECONDS=$((DEVICE_BUDGET_S - STARTUP_S - MARGIN_S))
    [ "$RUN_SECONDS" -gt "$RERUN_SECONDS" ] && RUN_SECONDS=$RERUN_SECONDS
else
    RUN_SECONDS=$((DEVICE_BUDGET_S - 2 * STARTUP_S - RERUN_SECONDS - MARGIN_S))
    [ "$RUN_SECONDS" -gt 300 ] && RUN_SECONDS=300
fi
RUN_SECONDS=${RUN_OVERRIDE_S:-$RUN_SECONDS}
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
echo "run of at most ${RUN_SECONDS} s (device budget ${DEVICE_BUDGET_S} s, start-up ${STARTUP_S} s, rerun ${RERUN:-0})"

step() {  # step NAME STATUS STARTED EXPECTED: one summary line, written at once
    printf '| %s | %s | %s | %s |\n' "$1" "$2" "$((SECONDS - $3))" "$4" >> "$SUMMARY"
    echo "[$(date +%H:%M:%S)] $1: $2 ($((SECONDS - $3)) s, expected $4)"
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

t=$SECONDS
if "$PY" -u -m poptune gpu-check --versions | tee "$OUT/versions.txt"; then
    step versions PASS "$t" "seconds (package metadata only)"
else
    step versions FAIL "$t" "seconds (package metadata only)"
    echo "FAIL versions: see versions.txt; the check needs them" | tee -a "$SUMMARY"
    exit 1
fi

DRY=${DRY_RUN:-0}
if [ "$DRY" != 1 ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    if command -v nvidia-smi > /dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
        step gpu-check "FAIL (nvidia-smi lists a GPU but torch sees no CUDA)" "$t" "-"
        nvidia-smi -L | tee -a "$SUMMARY"
        "$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)" | tee -a "$SUMMARY"
        exit 1
    fi
    DRY=1
    echo "no GPU here (nvidia-smi lists none) and no CUDA: a dry run"
fi

mkdir -p "$OUT/gpu-check"
if [ -n "${RESUME_FROM:-}" ] && [ "$DRY" != 1 ]; then
    cp "$RESUME_FROM" "$OUT/gpu-check/gpu-check.json" && echo "resuming from $RESUME_FROM"
fi
t=$SECONDS
budget=$((RUN_SECONDS - (SECONDS - START) - GRACE_SECONDS))
args=(--out "$OUT/gpu-check" --budget "$budget")
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
step gpu-check "$status" "$t" "at most ${budget} s (--budget; each stage's own estimate in gpu-check.md)"

t=$SECONDS
left=$((RUN_SECONDS - (SECONDS - START)))
if [ "$left" -ge "$TESTS_SECONDS" ]; then
    timeout "$left" "$PY" -u -m pytest -m cuda -q -p no:cacheprovider tests/measure/test_cuda.py 2>&1 \
        | tee "$OUT/cuda-tests.txt"
    trc=${PIPESTATUS[0]}
    if [ "$trc" = 0 ] || [ "$trc" = 5 ]; then status=PASS; else status="FAIL (exit $trc)"; fi
    step cuda-tests "$status" "$t" "at most ${TESTS_SECONDS} s"
else
    step cuda-tests "SKIP (${left} s left < ${TESTS_SECONDS} s: a rerun runs them)" "$t" "${TESTS_SECONDS} s"
fi

{
    echo
    echo "Total $((SECONDS - START)) s of at most ${RUN_SECONDS} s. The check's status lines:"
    echo
    echo '```'
    sed -n '/^```$/,/^```$/p' "$OUT/gpu-check/gpu-check.md" 2>/dev/null | sed '/^```$/d'
    echo '```'
} >> "$SUMMARY"
echo "summary: $SUMMARY"
[ $rc = 0 ]
