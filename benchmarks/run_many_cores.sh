#!/usr/bin/env bash
# Preprocess and plan scaling on a many-core host (16 cores), in one go, most important first.
#
# Usage:  benchmarks/run_many_cores.sh [COPY_TO]            # the whole measurement
#         PART=chunks benchmarks/run_many_cores.sh [COPY_TO]  # the follow-up, below
#   COPY_TO   a folder each results file is copied into as soon as its step ends
#   env: PY (python, default python3), DIR (work folder, default /tmp/many-cores),
#        RECORDS (default 1000000), PLAN_SAMPLES (default 1e8), BUDGET (seconds: later
#        steps are skipped past it), CHUTE_SHARED_DATA (the Qwen3 tokenizer and alpaca files,
#        default ../shared/data); chute importable (installed, or PYTHONPATH=src); on a host
#        without network, benchmarks/offline_bundle.sh brings the wheels and data (its header)
#
# Steps (results in benchmarks/results/):
#   1. preprocess_workers_many: the machine's ceiling (N copies of a CPU-bound job), a cold
#      run, then warm `chute preprocess --workers` 16, 8 and 1 (bench_preprocess_workers.py)
#   2. preprocess_parent_many: one warm 16-worker run profiled (profile_preprocess_parent.py)
#   3. scale_plans_many: every plan and mixture plan at 100M lengths (bench_scale.py)
#   4. preprocess_workers_many_more: warm --workers 4, 2 and 16 again
# PART=chunks, the follow-up to the whole measurement:
#   1. preprocess_workers_chunks: 16 and 8 workers (then 16 again) with the default chunk size
#      (a multiple of 16 chunks) and with 10,000 records a chunk (the default before), alternating
#   2. scale_plans_many_tasks: the plans whose memory grew with the threads (tasks per thread)
#   3. preprocess_workers_chunks_one: one worker, the baseline of the efficiency
# PART=final, what issue 30 still needs measured on such a host (about 6 minutes):
#   0. disk_flush_final: chunk-sized commits (6 MB, fsync) by 1 and 16 writers in waves
#      (bench_disk_flush.py): what a durable commit costs when 16 workers commit at once
#   1. preprocess_workers_final: 16 workers, then one (the baseline), then 16 twice more, each
#      a fresh `chute preprocess` as the program runs (the end-to-end efficiency at 16), with
#      every package it imports compiled first, as an installed chute is
#   2. preprocess_parent_final: one warm 16-worker run profiled, each chunk's CPU seconds and
#      fsync time beside its wall time (does a chunk at 16 workers wait, and for the disk?)
#   3. scale_plans_final: every plan and mixture plan at 100M lengths with the final code
set -u
PY=${PY:-python3}
DIR=${DIR:-/tmp/many-cores}
RECORDS=${RECORDS:-1000000}
PLAN_SAMPLES=${PLAN_SAMPLES:-1e8}
BUDGET=${BUDGET:-100000}
COPY=${1:-}
START=$SECONDS

copy() { if [ -n "$COPY" ]; then cp "benchmarks/results/$1.json" "$COPY/" 2>/dev/null; fi; true; }
left() { echo $((BUDGET - (SECONDS - START))); }
step() { echo "== $1 at $((SECONDS - START)) s" >&2; }

if [ "${PART:-all}" = final ]; then
    step disk_flush_final
    $PY benchmarks/bench_disk_flush.py --dir "$DIR/flush" --writers 1,16,16 --files 4 --gap 1.5 \
        --name disk_flush_final
    copy disk_flush_final
    step preprocess_workers_final
    $PY benchmarks/bench_preprocess_workers.py --records "$RECORDS" --workers 16,1 \
        --repeat 16,16 --dir "$DIR" --name preprocess_workers_final --deadline "$(left)"
    copy preprocess_workers_final
    if [ "$(left)" -gt 60 ]; then
        step preprocess_parent_final
        $PY benchmarks/profile_preprocess_parent.py --records "$RECORDS" --workers 16 \
            --dir "$DIR" --warm-only "$DIR/chute-cache" --name preprocess_parent_final
        copy preprocess_parent_final
    fi
    if [ "$(left)" -gt 120 ]; then
        step scale_plans_final
        $PY benchmarks/bench_scale.py --records 100000 --synthetic-lengths --dir "$DIR" \
            --plan-samples "$PLAN_SAMPLES" \
            --steps mix_packed,mix_budget,plan_packed,plan_budget,plan_grouped,mix_grouped \
            --name scale_plans_final
        copy scale_plans_final
    fi
    step done
    exit 0
fi

if [ "${PART:-all}" = chunks ]; then
    step preprocess_workers_chunks
    $PY benchmarks/bench_preprocess_workers.py --records "$RECORDS" --workers 16,8 \
        --repeat 16 --chunk-sizes auto,10000 --dir "$DIR" --name preprocess_workers_chunks
    copy preprocess_workers_chunks
    if [ "$(left)" -gt 60 ]; then
        step scale_plans_many_tasks
        $PY benchmarks/bench_scale.py --records 100000 --synthetic-lengths --dir "$DIR" \
            --plan-samples "$PLAN_SAMPLES" --steps mix_packed,mix_grouped,plan_packed \
            --name scale_plans_many_tasks
        copy scale_plans_many_tasks
    fi
    if [ "$(left)" -gt 170 ]; then  # 1M records on one worker: about 150 s
        step preprocess_workers_chunks_one
        $PY benchmarks/bench_preprocess_workers.py --records "$RECORDS" --workers 1 \
            --dir "$DIR" --name preprocess_workers_chunks_one --deadline "$(left)"
        copy preprocess_workers_chunks_one
    fi
    step done
    exit 0
fi

step preprocess_workers_many
$PY benchmarks/bench_preprocess_workers.py --records "$RECORDS" --workers 16,8,1 --ceiling \
    --dir "$DIR" --name preprocess_workers_many --deadline "$(left)"
copy preprocess_workers_many

if [ "$(left)" -gt 60 ]; then
    step preprocess_parent_many
    $PY benchmarks/profile_preprocess_parent.py --records "$RECORDS" --workers 16 --dir "$DIR" \
        --warm-only "$DIR/chute-cache" --name preprocess_parent_many
    copy preprocess_parent_many
fi

if [ "$(left)" -gt 120 ]; then
    step scale_plans_many
    $PY benchmarks/bench_scale.py --records "$RECORDS" --synthetic-lengths --dir "$DIR" \
        --plan-samples "$PLAN_SAMPLES" \
        --steps mix_budget,mix_packed,plan_packed,plan_budget,plan_grouped,mix_grouped \
        --name scale_plans_many
    copy scale_plans_many
fi

if [ "$(left)" -gt 60 ]; then
    step preprocess_workers_many_more
    $PY benchmarks/bench_preprocess_workers.py --records "$RECORDS" --workers 4,2,16 \
        --dir "$DIR" --name preprocess_workers_many_more --deadline "$(left)"
    copy preprocess_workers_many_more
fi
step done
