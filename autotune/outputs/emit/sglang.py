"""``python -m sglang.launch_server`` scripts for a serve plan (targets SGLang 0.5.23; flags as its ``--help``
spells them; checked by SGLang's own argument parsing, resolution and ``check_server_args`` in CI).

Mapping:

* ``tp``, ``pp`` -> ``--tp-size``, ``--pp-size``.  A MoE engine with ``dp > 1`` is attention data parallelism
  over the engine's ``tp*dp`` GPUs: ``--tp-size tp*dp --attn-dp-size dp``; ``--ep-size ep`` splits the
  experts (any width that divides the engine; one that does not divide the experts adds ``--enable-eplb
  --ep-num-redundant-experts R``, the copies that fill the ranks, ``engines.physical_experts``).  Expert
  parallelism over the whole attention-DP engine dispatches with DeepEP, as the estimate prices it:
  ``--moe-a2a-backend deepep --deepep-mode auto`` (prefill servers ``normal``, decode servers ``low_latency``).  A dense
  engine's ``dp`` is ``--dp-size`` (data-parallel
  replicas inside one server, one node).
* An engine over several nodes: ``--nnodes N --node-rank k --dist-init-addr HEAD:5000``.
* Weights: read from the checkpoint where it holds them (SGLang reads the scheme from the config; ModelOpt
  NVFP4 is named ``modelopt_fp4``), else quantized at load (``fp8``; ``nvfp4_online`` on Blackwell).
* Memory: ``--mem-fraction-static`` caps weights plus KV cache (activations and CUDA graphs use the rest):
  the value the plan's batch was checked against; ``--max-running-requests`` the batch limit (of the engine with
  attention DP, which SGLang divides among its ranks; of each replica of a dense ``--dp-size``);
  ``--chunked-prefill-size`` the prefill chunk (with attention DP, each rank's share a whole number of KV
  pages: 64 tokens on Blackwell, and for DeepSeek sparse attention on any GPU); ``--context-length`` with slack.
* Disaggregated plans: ``--disaggregation-mode prefill|decode`` with the NIXL transfer backend and a bootstrap
  port on each prefill server, ``python -m sglang_router.launch_router --pd-disaggregation`` in front;
  replicas: ``--worker-urls``.
"""

from __future__ import annotations

from typing import Mapping

from ...errors import InputError
from ...serving.engines import (DEEPEP_LL_MAX_TOKENS, GIB, redundant_experts, sglang_default_graph_batch,
                                sglang_server_chunk)
from ...serving.checkpoint import checkpoint_format, how
from . import shell
from .serve_common import (
    BASE_PORT,
    ROUTER_PORT,
    EngineSlot,
    ServeContext,
    addr,
    placement,
    port_of,
    render_script,
    url,
)

RELEASE = "SGLang 0.5.23"
SCRIPT = "serve_sglang.sh"
DIST_PORT = 5000
BOOTSTRAP_PORT = 8998
ONLINE: Mapping[str, str] = {"fp8": "fp8", "fp4": "nvfp4_online"}
# checkpoint formats SGLang wants named rather than detected
NAMED: Mapping[tuple[str, str], str] = {("fp4", "nvfp4"): "modelopt_fp4", ("fp4", "modelopt"): "modelopt_fp4"}


def refusals(ctx: ServeContext) -> list[str]:
    out = []
    for name, pool in zip(("prefill_", "decode_"), ctx.plan.pools()):
        prefix = name if ctx.plan.disaggregated else ""
        width = pool.tp * pool.pp * pool.dp
        if not ctx.model.is_moe and pool.dp > 1 and width > ctx.gpus_per_node:
            out.append(f"{prefix}dp={pool.dp} over nodes: SGLang runs dense data-parallel replicas inside one node "
                       "(use replicas)")
        if width > ctx.gpus_per_node and (pool.tp * pool.dp) % (width // ctx.gpus_per_node):
            out.append(f"{prefix}tp*dp must be divisible by the number of nodes")
    return list(dict.fromkeys(out))


def quantization_flags(ctx: ServeContext) -> tuple[list[shell.Group], str]:
    w = ctx.plan.weights
    source = how(w, ctx.checkpoint, "sglang", ctx.model.is_moe, fp4_cores=ctx.fp4_cores)
    if source == "online":
        return [("--quantization", ONLINE[w])], f"{w} weights quantized at load from the bf16 checkpoint ({ONLINE[w]})"
    if w == "bf16":
        note = "bf16 weights" if source == "checkpoint" else f"bf16 weights: point MODEL at a bf16 checkpoint (--checkpoint is {ctx.checkpoint})"
        return [("--dtype", "bfloat16")], note
    named = NAMED.get((w, checkpoint_format(ctx.checkpoint)))
    flags = [("--quantization", named)] if named else []
    if source == "checkpoint":
        return flags, f"{w} weights read from the {ctx.checkpoint} checkpoint"
    return flags, (f"{w} weights: THIS PLAN NEEDS A PRE-QUANTIZED {w.upper()} CHECKPOINT (--checkpoint is "
                   f"{ctx.checkpoint}); point MODEL at one")


DEEPEP_MODES = {"engine": "auto", "prefill": "normal", "decode": "low_latency"}


def bootstrap_port(slot: EngineSlot, slots: list[EngineSlot]) -> int:
    """A prefill server's KV bootstrap port, unique on its node."""
    return BOOTSTRAP_PORT + port_of(slot, slots) - BASE_PORT


def sglang_command(ctx: ServeContext, slot: EngineSlot, rank: int, slots: list[EngineSlot]) -> list[shell.Group]:
    p, pool = ctx.plan, slot.pool
    groups: list[shell.Group] = []
    deepep = ctx.model.is_moe and pool.ep > 1 and pool.dp > 1 and pool.ep == pool.tp * pool.dp
    mode = DEEPEP_MODES[slot.role]
    if deepep and mode != "normal":
        # DeepEP's low-latency dispatch holds at most SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK tokens a rank
        # (default 128) and asserts past it; a rank's decode batch and SGLang's CUDA-graph capture (up to 512
        # sequences a rank) must fit. Its internode kernels stop at 1,024: a larger batch a rank runs the normal
        # kernels (without CUDA graphs) instead
        per_rank = -(-p.max_batch // pool.dp)
        if per_rank > DEEPEP_LL_MAX_TOKENS:
            mode = "normal"
        else:
            tokens = min(DEEPEP_LL_MAX_TOKENS, max(512, -(-per_rank // 128) * 128))
            groups.append((shell.Raw(f"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK={tokens}"),))
    groups += [("python", "-m", "sglang.launch_server"), ("--model-path", shell.Raw('"$MODEL"'))]
    if ctx.remote_code:  # the repository's own tokenizer or model code (Kimi, MiniMax): refused without it
        groups.append(("--trust-remote-code",))
    if ctx.model.is_moe and pool.dp > 1:
        groups.append(("--tp-size", pool.tp * pool.dp))
        groups.append(("--attn-dp-size", pool.dp))
    else:
        groups.append(("--tp-size", pool.tp))
        if pool.dp > 1:
            groups.append(("--dp-size", pool.dp))
    if pool.pp > 1:
        groups.append(("--pp-size", pool.pp))
    if ctx.model.is_moe and pool.ep > 1:
        groups.append(("--ep-size", pool.ep))
        redundant = redundant_experts(ctx.model.moe.n_experts, pool.ep)
        if redundant:  # ep does not divide the experts: EPLB fills each rank with copies of the busiest ones
            groups.append(("--enable-eplb",))
            groups.append(("--ep-num-redundant-experts", redundant))
        if deepep:
            # the estimate prices DeepEP's dispatch (a token sent once to each rank holding its experts, fp8) and
            # combine; SGLang's default backend gathers every token to every rank. DeepEP sets ep to the engine's
            # tp size, which this is; normal kernels for prefill, low-latency ones for decode, auto for both
            groups.append(("--moe-a2a-backend", "deepep"))
            groups.append(("--deepep-mode", mode))
    groups += quantization_flags(ctx)[0]
    groups.append(("--kv-cache-dtype", "fp8_e4m3" if p.kv == "fp8" else "auto"))
    # the plan's batch is the engine's; SGLang divides the flag among attention-DP ranks only (its KV configurator:
    # max_running_requests // attn_dp_size), while each of a dense --dp-size's replicas admits the whole flag
    dense_dp = not (ctx.model.is_moe and pool.dp > 1) and pool.dp > 1
    groups.append(("--max-running-requests", max(p.max_batch // pool.dp, 1) if dense_dp else p.max_batch))
    if ctx.model.is_moe and pool.dp > 1 and slot.role != "prefill" and ctx.gpu_memory_gib:
        # SGLang captures decode graphs up to 512 sequences a rank (256 on smaller GPUs and engines), capped under
        # attention DP by the whole server's --max-running-requests, not a rank's share: a rank running fewer would
        # capture graphs, and reserve 3 MiB per sequence of every DP rank, for batches it never runs.  Pinned at the
        # rank's batch, as the estimate and its memory fraction count them (engines.sglang_reserved_bytes)
        per_rank = -(-p.max_batch // pool.dp)
        memory = ctx.gpu_memory_gib * GIB
        if per_rank < int(sglang_default_graph_batch(pool.tp, pool.dp, memory, moe=True)):
            groups.append(("--cuda-graph-max-bs-decode", per_rank))
    if ctx.prefill_tokens:
        # a rank's share of the budget a whole number of KV pages (SGLang refuses it otherwise), as estimated
        groups.append(("--chunked-prefill-size", int(sglang_server_chunk(ctx.prefill_tokens, pool.dp,
                                                                          moe=ctx.model.is_moe,
                                                                          page=ctx.kv_page_tokens))))
    groups.append(("--context-length", ctx.context_length))
    if ctx.memory_flag(slot.role) is not None:
        groups.append(("--mem-fraction-static", f"{ctx.memory_flag(slot.role):g}"))
    if slot.multi_node:
        groups.append(("--nnodes", len(slot.nodes)))
        groups.append(("--node-rank", rank))
        groups.append(("--dist-init-addr", shell.Raw(f'"${{ADDR[{int(slot.head)}]}}:{DIST_PORT}"')))
    if p.disaggregated:
        groups.append(("--disaggregation-mode", slot.role))
        groups.append(("--disaggregation-transfer-backend", "nixl"))
        if slot.role == "prefill":
            groups.append(("--disaggregation-bootstrap-port", bootstrap_port(slot, slots)))
    groups.append(("--host", "0.0.0.0"))
    groups.append(("--port", port_of(slot, slots)))
    return groups


def router_command(ctx: ServeContext, slots: list[EngineSlot]) -> list[shell.Group]:
    groups: list[shell.Group] = [("python", "-m", "sglang_router.launch_router"), ("--host", "0.0.0.0"),
                                 ("--port", ROUTER_PORT)]
    if ctx.plan.disaggregated:
        groups.append(("--pd-disaggregation",))
        groups += [("--prefill", url(s, slots), bootstrap_port(s, slots)) for s in slots if s.role == "prefill"]
        groups += [("--decode", url(s, slots)) for s in slots if s.role == "decode"]
    else:
        groups.append(("--worker-urls", *(url(s, slots) for s in slots)))
    return groups


def render(ctx: ServeContext) -> dict[str, str]:
    reasons = refusals(ctx)
    if reasons:
        raise InputError("SGLang 0.5.23 cannot express this plan: " + "; ".join(reasons), field="--format")
    placement(ctx.plan, ctx.gpus_per_node)
    notes = [f"weights: {quantization_flags(ctx)[1]}"]
    if ctx.engine_note:
        notes.extend(ctx.engine_note.split("\n"))
    return {SCRIPT: render_script(RELEASE, ctx, notes, sglang_command, router_command, SCRIPT)}


__all__ = ["RELEASE", "render", "sglang_command", "router_command", "refusals", "addr"]
