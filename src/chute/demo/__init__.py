"""``chute demo``: the main job end to end on generated data (``run.py``).

``data.py`` writes a text dataset and trains a tiny BPE tokenizer offline; ``multimodal.py``
writes LLaVA-style records with drawn images and planted faults; ``model.py`` is the tiny
vision-language model the demo trains on packed batches (it needs torch).
"""

from chute.demo.data import write_demo_dataset, write_demo_tokenizer
from chute.demo.run import DemoResult, run_demo

__all__ = ["DemoResult", "run_demo", "write_demo_dataset", "write_demo_tokenizer"]
