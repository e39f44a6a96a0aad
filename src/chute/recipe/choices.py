"""The values of the recipe's choice options, in a module that imports nothing.

Kept apart so the contract (``contract.py``), the length policy and the task strategies name
the same values without importing one another.

Example:
    >>> OVERFLOW, TASKS
    (('truncate', 'drop', 'split'), ('sft', 'preference', 'kto'))
"""

__all__ = ["OVERFLOW", "TASKS"]

OVERFLOW = ("truncate", "drop", "split")  # what max_length does to a longer sample
TASKS = ("sft", "preference", "kto")  # the kinds of sample (one strategy each: tasks.py)
