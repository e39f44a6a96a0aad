#!/usr/bin/env bash
# A bundle to run the benchmarks on a machine without network (e.g. a lent many-core host whose
# Python has torch, numpy, pyarrow, tokenizers and tiktoken but not chute's other dependencies).
#
# Usage (here, with network):   benchmarks/offline_bundle.sh            # writes .offline/
# There (the repository copied with .offline/ beside src/):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site \
#       --find-links .offline/wheels -r .offline/requirements.txt
#   export PYTHONPATH=$PWD/src:/tmp/site CHUTE_SHARED_DATA=$PWD/.offline/data PYTHONUNBUFFERED=1
#   PART=final BUDGET=540 benchmarks/run_many_cores.sh "$OUT"
#
# .offline/ is ignored by git. The wheels are pure Python or manylinux x86_64, for each Python
# version in PYVERS (pip there picks the one that fits); the data are the Qwen3 tokenizer
# and the alpaca and ShareGPT demo files the benchmarks' records are made from (from
# CHUTE_SHARED_DATA, default ../shared/data), copied, not committed. PEERS=1 adds the wheels
# `bench_preprocess.py`'s `datasets` sides need beyond such a host's packages (datasets, dill,
# multiprocess, at the versions of this venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PYVERS=${PYVERS:-3.10 3.11 3.12 3.13}
DATA=${CHUTE_SHARED_DATA:-../shared/data}
OUT=.offline
rm -rf "$OUT" && mkdir -p "$OUT/wheels" "$OUT/data/tokenizers/qwen3" "$OUT/data/llama-factory" \
    "$OUT/data/fastchat"
# chute's runtime dependencies beyond what such a host has, without their own dependencies
# (each listed), the newest that fits each Python version and pyproject.toml's bounds
WHEELS="orjson typer<0.29 typing-extensions annotated-doc shellingham rich markdown-it-py mdurl
pygments"
if [ "${PEERS:-0}" = 1 ]; then
    for name in datasets dill multiprocess; do
        WHEELS="$WHEELS $name==$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))")"
    done
fi
for version in $PYVERS; do
    # shellcheck disable=SC2086
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$version" \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 -d "$OUT/wheels" $WHEELS
done
printf '%s\n' $WHEELS > "$OUT/requirements.txt"
cp "$DATA/tokenizers/qwen3/tokenizer.json" "$DATA/tokenizers/qwen3/tokenizer_config.json" \
    "$OUT/data/tokenizers/qwen3/"
cp "$DATA/llama-factory/alpaca_en_demo.json" "$DATA/llama-factory/alpaca_zh_demo.json" \
    "$OUT/data/llama-factory/"
cp "$DATA/fastchat/dummy_conversation.json" "$OUT/data/fastchat/"
du -sh "$OUT"/wheels "$OUT"/data
