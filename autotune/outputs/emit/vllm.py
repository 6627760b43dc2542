"""``vllm serve`` launch commands for a serve plan: one engine per replica, a load balancer in front.

Targets vLLM 0.8 (flags as ``vllm serve --help`` spells them there).  Every value is
shell-quoted (``autotune/outputs/emit/shell.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ...inputs.modelspec import ModelSpec
from ...serving.plan import ServePlan
from . import shell

RELEASE = "vLLM 0.8"
BASE_PORT = 8000

# Weight precision -> (--quantization value or None, note).  int8 and fp4 come from a checkpoint
# quantised offline; vLLM reads the scheme from its config.
QUANTIZATION: Mapping[str, tuple[str | None, str]] = {
    "bf16": (None, "bf16 weights (--dtype bfloat16)"),
    "fp8": ("fp8", "fp8 weights quantised at load time (W8A8 dynamic)"),
    "int8": (None, "int8 W8A8: point MODEL at a compressed-tensors W8A8 checkpoint; vLLM reads the scheme from it"),
    "int4": ("awq", "int4 weight-only (group 128): point MODEL at an AWQ checkpoint"),
    "fp4": (None, "fp4 (NVFP4): point MODEL at a ModelOpt NVFP4 checkpoint; vLLM reads the scheme from it"),
}


@dataclass(frozen=True)
class ServeContext:
    plan: ServePlan
    model: ModelSpec
    hardware: str
    max_model_len: int  # prompt + output tokens the engine must hold per sequence
    model_path: str | None = None  # Hugging Face name or folder [default: the spec name]
    gpu_memory_utilization: float = 0.90
    estimate: Mapping | None = None


def _header(release: str, ctx: ServeContext, notes: list[str]) -> list[str]:
    p = ctx.plan
    lines = [f"Written by autotune for {release}. Edit freely; rerun `autotune emit` to regenerate.",
             f"model: {ctx.model.name}; hardware: {ctx.hardware}; plan: {p.as_string()}",
             f"{p.replicas} replica(s) of tp {p.tp} x pp {p.pp} GPUs; up to {ctx.max_model_len} tokens per sequence"]
    if ctx.estimate:
        e = ctx.estimate
        lines.append(f"predicted: {e['output_tokens_per_s']:,.0f} output tokens/s in total, TTFT {e.get('ttft_ms') or 0:,.0f} ms, "
                     f"TPOT {e.get('tpot_ms') or 0:,.1f} ms (autotune's analytic serving model)")
    lines += notes
    if p.replicas > 1:
        lines.append(f"Each replica is an independent server on its own GPUs and port ({BASE_PORT}..{BASE_PORT + p.replicas - 1}); "
                     "put a load balancer (e.g. nginx, Envoy, or a router that balances by queue length) in front of them.")
    return lines


def replica_devices(plan: ServePlan, replica: int) -> str:
    width = plan.tp * plan.pp
    return ",".join(str(d) for d in range(replica * width, (replica + 1) * width))


def render_script(release: str, ctx: ServeContext, notes: list[str], command_for) -> str:
    """A bash script that starts every replica in the background and waits."""
    lines = ["#!/usr/bin/env bash"]
    lines += shell.comment_lines(_header(release, ctx, notes))
    lines += ["set -euo pipefail", "", shell.default_assignment("MODEL", ctx.model_path or ctx.model.name), ""]
    gpus_per_host = ctx.plan.tp * ctx.plan.pp
    for r in range(ctx.plan.replicas):
        lines += shell.comment_lines([f"replica {r + 1} of {ctx.plan.replicas}"])
        groups = [(shell.Raw("CUDA_VISIBLE_DEVICES=" + shell.word(replica_devices(ctx.plan, r))),)] + command_for(ctx, BASE_PORT + r)
        cmd = shell.command(groups)
        cmd[-1] = cmd[-1] + " &"
        lines += cmd
        lines.append("")
    lines.append("wait")
    if ctx.plan.replicas * gpus_per_host > 8:
        lines.insert(1, "# Replicas beyond the first node's GPUs: run the matching lines on the other nodes.")
    return "\n".join(lines) + "\n"


def vllm_groups(ctx: ServeContext, port: int) -> list[shell.Group]:
    p = ctx.plan
    quant, _ = QUANTIZATION[p.weights]
    groups: list[shell.Group] = [("vllm", "serve", shell.Raw('"$MODEL"'))]
    groups.append(("--tensor-parallel-size", p.tp))
    groups.append(("--pipeline-parallel-size", p.pp))
    if p.ep > 1:
        groups.append(("--enable-expert-parallel",))
    if quant:
        groups.append(("--quantization", quant))
    if p.weights == "bf16":
        groups.append(("--dtype", "bfloat16"))
    groups.append(("--kv-cache-dtype", "fp8" if p.kv == "fp8" else "auto"))
    groups.append(("--max-num-seqs", p.max_batch))
    groups.append(("--max-model-len", ctx.max_model_len))
    groups.append(("--gpu-memory-utilization", f"{ctx.gpu_memory_utilization:g}"))
    groups.append(("--port", port))
    return groups


def render(ctx: ServeContext) -> dict[str, str]:
    _, note = QUANTIZATION[ctx.plan.weights]
    return {"serve_vllm.sh": render_script(RELEASE, ctx, [f"weights: {note}"], vllm_groups)}
