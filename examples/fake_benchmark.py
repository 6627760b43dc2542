"""A stand-in for your benchmark: it reads the plan from the AUTOTUNE_* variables that `autotune tune`
sets, "measures" it, and prints one JSON line with tokens/s per GPU and peak memory.

A real one would launch a few training steps with the plan (for example with the launch config of
`autotune emit`) and report what it measured.
"""

import json
import os

tp = int(os.environ["AUTOTUNE_TP"])
pp = int(os.environ["AUTOTUNE_PP"])
mbs = int(os.environ["AUTOTUNE_MBS"])
recompute = os.environ["AUTOTUNE_RECOMPUTE"]
# A made-up response: communication costs grow with tp and pp, recomputation costs a third.
tokens = 9000.0 / (1 + 0.06 * (tp - 1) + 0.04 * (pp - 1)) * (1 + 0.03 * (mbs - 1))
tokens *= {"none": 1.0, "selective": 0.97, "full": 0.75}.get(recompute, 1.0)
print(json.dumps({"tokens_per_s_per_gpu": round(tokens, 1), "peak_memory_gib": 60.0}))
