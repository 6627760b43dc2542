"""A stand-in benchmark for the measured-trial tests: its throughput is a known function of the plan.

It reads the plan from AUTOTUNE_PLAN (never from its arguments) and looks it up in the JSON table
named by FAKE_BENCH_TABLE: {"plan string": {"tokens": x} | {"crash": true} | {"timeout": true} |
{"oom": true}}.  Plans missing from the table measure 100 tokens/s/GPU.  FAKE_BENCH_SLEEP seconds
of "training" come first.  It prints one JSON line (or, with FAKE_BENCH_RESULT_FILE=1, writes it
to AUTOTUNE_RESULT_JSON).  With FAKE_BENCH_INPUTS_DIR set it writes there the ``inputs`` its plan file held.
"""

import json
import os
import sys
import time

plan_key = os.environ["AUTOTUNE_PLAN"]
with open(os.environ["AUTOTUNE_PLAN_JSON"]) as handle:
    document = json.load(handle)
    assert document["plan"]["tp"] == int(os.environ["AUTOTUNE_TP"])
if os.environ.get("FAKE_BENCH_INPUTS_DIR"):  # keep the inputs this run was handed, one file a run
    with open(os.path.join(os.environ["FAKE_BENCH_INPUTS_DIR"], f"{os.getpid()}.json"), "w") as handle:
        json.dump(document.get("inputs"), handle)
table = json.load(open(os.environ["FAKE_BENCH_TABLE"])) if os.environ.get("FAKE_BENCH_TABLE") else {}
entry = table.get(plan_key, {"tokens": 100.0})
time.sleep(float(os.environ.get("FAKE_BENCH_SLEEP", "0")))
if entry.get("crash"):
    print("Traceback: RuntimeError: NCCL error in the fake benchmark", file=sys.stderr)
    sys.exit(3)
if entry.get("timeout"):
    time.sleep(60)
if entry.get("oom"):
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr)
    sys.exit(1)
result = {"tokens_per_s_per_gpu": entry["tokens"], "peak_memory_gib": entry.get("memory", 40.0)}
print("step 10 loss 2.31", flush=True)
if os.environ.get("FAKE_BENCH_RESULT_FILE"):
    with open(os.environ["AUTOTUNE_RESULT_JSON"], "w") as handle:
        json.dump(result, handle)
else:
    print(json.dumps(result))
