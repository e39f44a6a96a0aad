"""``python -m chute``: the ``chute`` program, where its script is not on ``PATH``.

Example:
    ``python -m chute validate data.jsonl --tokenizer Qwen/Qwen3-8B`` is
    ``chute validate data.jsonl --tokenizer Qwen/Qwen3-8B``.
"""

import sys

from chute.cli import main

if __name__ == "__main__":
    sys.argv[0] = "chute"  # ends as the program does (no interpreter teardown)
    main(prog_name="python -m chute")
