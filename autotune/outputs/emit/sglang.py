"""``python -m sglang.launch_server`` commands for a serve plan: one server per replica.

Targets SGLang 0.4.9 (flags as ``python -m sglang.launch_server --help`` spells them there).
"""

from __future__ import annotations

from typing import Mapping

from . import shell
from .vllm import ServeContext, render_script

RELEASE = "SGLang 0.4.9"

QUANTIZATION: Mapping[str, tuple[str | None, str]] = {
    "bf16": (None, "bf16 weights (--dtype bfloat16)"),
    "fp8": ("fp8", "fp8 weights quantised at load time"),
    "int8": ("w8a8_int8", "int8 W8A8: point MODEL at a W8A8 int8 checkpoint"),
    "int4": ("awq", "int4 weight-only (group 128): point MODEL at an AWQ checkpoint"),
    "fp4": ("modelopt_fp4", "fp4 (NVFP4): point MODEL at a ModelOpt NVFP4 checkpoint"),
}


def sglang_groups(ctx: ServeContext, port: int) -> list[shell.Group]:
    p = ctx.plan
    quant, _ = QUANTIZATION[p.weights]
    groups: list[shell.Group] = [("python", "-m", "sglang.launch_server"), ("--model-path", shell.Raw('"$MODEL"'))]
    groups.append(("--tp-size", p.tp))
    if p.pp > 1:
        groups.append(("--pp-size", p.pp))
    if p.ep > 1:
        groups.append(("--ep-size", p.ep))
    if quant:
        groups.append(("--quantization", quant))
    if p.weights == "bf16":
        groups.append(("--dtype", "bfloat16"))
    groups.append(("--kv-cache-dtype", "fp8_e4m3" if p.kv == "fp8" else "auto"))
    groups.append(("--max-running-requests", p.max_batch))
    groups.append(("--context-length", ctx.max_model_len))
    groups.append(("--mem-fraction-static", f"{ctx.gpu_memory_utilization:g}"))
    groups.append(("--port", port))
    return groups


def render(ctx: ServeContext) -> dict[str, str]:
    _, note = QUANTIZATION[ctx.plan.weights]
    return {"serve_sglang.sh": render_script(RELEASE, ctx, [f"weights: {note}"], sglang_groups)}
