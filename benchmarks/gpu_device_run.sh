#!/usr/bin/env bash
# The GPU check's device run: the one prepared script for one call of a lent GPU machine (docs/gpu-check.md).
#
#   OUT=/some/folder bash benchmarks/gpu_device_run.sh      # from the repository root; the device tool sets $OUT
#   DRY_RUN=1 OUT=/tmp/dry bash benchmarks/gpu_device_run.sh  # no device work (also automatic without CUDA)
#
# Imports: the device machine installs nothing and copies the working tree only, so the repository root goes on
# PYTHONPATH (after the carried wheels' /tmp/site) and the check runs as `python -m poptune gpu-check`.
#
# Order: install the carried wheels (if any), the version preflight, the GPU check (first: it is what the call is
# for), then the CUDA tests if their allowance still fits. Everything goes under $OUT as it happens (python -u,
# tee): device-run.log, versions.txt, gpu-check/ (json and md after every stage), cuda-tests.txt, summary.md.
# The whole run takes at most RUN_SECONDS (390 s, 6.5 minutes) of wall time: two runs leave 120 s of the 15
# minutes of device time for a fresh machine's start-up. The check's --budget is what is left after the tests'
# allowance and a grace; a stage the plan expects not to finish in the budget's rest is skipped, not killed.

set -uo pipefail
: "${OUT:?set OUT to the folder the results go to}"
PY=${PYTHON:-python3}
RUN_SECONDS=${RUN_SECONDS:-390}
TESTS_SECONDS=60   # allowance of the CUDA tests (tests/measure/test_cuda.py): about 15 energy blocks of >= 1 s, imports
GRACE_SECONDS=20   # the check's start-up (imports, preflight's 1 s matmul) and its last write
mkdir -p "$OUT"
exec > >(tee -a "$OUT/device-run.log") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
START=$SECONDS
SUMMARY="$OUT/summary.md"
printf '# GPU device run\n\n| step | status | seconds | expected |\n|---|---|---|---|\n' > "$SUMMARY"

step() {  # step NAME STATUS STARTED EXPECTED: one summary line, written at once
    printf '| %s | %s | %s | %s |\n' "$1" "$2" "$((SECONDS - $3))" "$4" >> "$SUMMARY"
    echo "[$(date +%H:%M:%S)] $1: $2 ($((SECONDS - $3)) s, expected $4)"
}

t=$SECONDS
if compgen -G ".whl/*.whl" > /dev/null; then
    if "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl; then status=PASS; else status=FAIL; fi
    step install "$status" "$t" "not estimated (local wheels, no network)"
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
    DRY=1
    echo "no CUDA device here: a dry run (every GPU stage SKIP)"
fi

t=$SECONDS
budget=$((RUN_SECONDS - (SECONDS - START) - TESTS_SECONDS - GRACE_SECONDS))
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
[ "$DRY" = 1 ] && [ $rc = 0 ] && status="PASS (dry run: stages SKIP)"
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
    step cuda-tests "SKIP (${left} s left < ${TESTS_SECONDS} s)" "$t" "${TESTS_SECONDS} s"
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
