"""Shared by the emit tests (no tests here): the three golden plans, and running a script with stub launchers.

The golden estimates are fixed numbers, not the cost model's current output, so
that a change to the cost model does not change the golden files.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from autotune.inputs.modelspec import load_model
from autotune.outputs.emit import EmitContext
from autotune.training.plan import parse_plan

GOLDEN = Path(__file__).parent / "golden" / "emit"

CASES = {
    # Dense 3D parallelism: GPT-3 175B on 1024 A100s, interleaved pipeline, Megatron sequence parallelism.
    "gpt3": dict(model="gpt3-175b", hardware="a100-sxm4-80gb", gpus=1024, gpus_per_node=8, seq_len=2048,
                 global_batch=1536, plan="tp=4,pp=8,vp=4,sp=true,zero=1,mbs=1,recompute=none,precision=bf16",
                 estimate=dict(step_time_s=15.58, memory_gib_per_gpu=60.8, mfu=0.671, tokens_per_s_per_gpu=197.0)),
    # Mixtral 8x7B with expert parallelism 8 inside data parallelism 64, full recompute.
    "mixtral": dict(model="mixtral-8x7b", hardware="h100-sxm5-80gb", gpus=64, gpus_per_node=8, seq_len=4096,
                    global_batch=512, plan="tp=1,pp=1,ep=8,zero=1,mbs=1,recompute=full,precision=bf16",
                    estimate=dict(step_time_s=5.892, memory_gib_per_gpu=53.6, mfu=0.448, tokens_per_s_per_gpu=5561.0)),
    # Llama 3 70B at 128k tokens: context parallelism 16 with tensor parallelism 4 and ZeRO-3.
    "longseq": dict(model="llama3-70b", hardware="h100-sxm5-80gb", gpus=128, gpus_per_node=8, seq_len=131072,
                    global_batch=32, plan="tp=4,cp=16,zero=3,mbs=1,recompute=none,precision=bf16",
                    estimate=dict(step_time_s=65.98, memory_gib_per_gpu=60.5, mfu=0.468, tokens_per_s_per_gpu=497.0)),
    # DeepSeek-V3 (MLA, 256 routed experts with node-limited routing, dense first layers, MTP) as NVIDIA runs
    # it on 1024 H100s (yanring/Megatron-MoE-ModelZoo best_practice/DeepSeekV3/run.sh): TP2 with expert TP 1
    # (MoE parallel folding), PP8 x VP4, EP64 across 8 nodes, blockwise fp8, MLA up-projection recompute.
    "deepseek": dict(model="deepseek-v3", hardware="h100-sxm5-80gb", gpus=1024, gpus_per_node=8, seq_len=4096,
                     global_batch=8192,
                     plan="tp=2,pp=8,vp=4,ep=64,etp=1,sp=true,zero=1,mbs=1,recompute=selective,precision=fp8",
                     estimate=dict(step_time_s=21.98, memory_gib_per_gpu=58.6, mfu=0.196,
                                   tokens_per_s_per_gpu=1491.0)),
}
# The framework each case's Slurm golden runs (one of each).
SLURM_FRAMEWORK = {"gpt3": "megatron", "mixtral": "deepspeed", "longseq": "torchtitan", "deepseek": "megatron"}


def context_for(case: str, framework: str = "megatron", plan: str | None = None, seq_len: int | None = None,
                global_batch: int | None = None, **options) -> EmitContext:
    spec = CASES[case]
    return EmitContext(
        plan=parse_plan(plan or spec["plan"], spec["gpus"]),
        model=load_model(spec["model"]),
        hardware=spec["hardware"],
        gpus_per_node=spec["gpus_per_node"],
        seq_len=seq_len or spec["seq_len"],
        global_batch=global_batch or spec["global_batch"],
        estimate=spec["estimate"],
        framework=framework,
        **options,
    )


_STUB = """#!{python}
import json, os, sys
name = os.path.basename(sys.argv[0])
if name == "scontrol":
    print("node-a"); print("node-b"); sys.exit(0)
keep = ("MASTER_ADDR", "MASTER_PORT", "PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_DEBUG", "DATA_PATH", "TOKENIZER",
        "DS_ENV_FILE", "OMP_NUM_THREADS")
record = {{"prog": name, "argv": sys.argv[1:], "env": {{k: os.environ[k] for k in keep if k in os.environ}}}}
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps(record) + "\\n")
"""


def run_script(script: Path, cwd: Path, *extra: str) -> list[dict]:
    """Run an emitted script with bash, with torchrun, srun, scontrol and deepspeed replaced by stubs
    that record their arguments; return the recorded calls."""
    stubs = cwd / ".stubs"
    stubs.mkdir(exist_ok=True)
    for name in ("torchrun", "srun", "scontrol", "deepspeed"):
        path = stubs / name
        path.write_text(_STUB.format(python=sys.executable))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    log = cwd / ".stub-log.jsonl"
    log.unlink(missing_ok=True)
    env = {
        "PATH": f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}",
        "STUB_LOG": str(log),
        "HOME": str(cwd),
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_JOB_ID": "4242",
        "SLURM_SUBMIT_DIR": str(cwd),
    }
    done = subprocess.run(["bash", str(script), *extra], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
