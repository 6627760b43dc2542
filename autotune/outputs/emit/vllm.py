"""``vllm serve`` launch scripts for a serve plan (targets vLLM 0.33; flags as ``vllm serve --help`` spells them).

Mapping (checked by vLLM's own argument parser and config validation in CI, tests/test_emit_serving_engines.py):

* ``tp``, ``pp`` -> ``--tensor-parallel-size``, ``--pipeline-parallel-size``; ``dp`` -> ``--data-parallel-size``
  (for a MoE model the DP ranks are attention data parallelism and share the experts); ``ep = tp*dp`` ->
  ``--enable-expert-parallel`` (vLLM's expert parallelism spans every GPU of the engine: it cannot express
  another EP width); an ``ep`` that does not divide the experts adds ``--enable-eplb`` and
  ``--eplb-config '{"num_redundant_experts": R}'`` (R copies fill the ranks, ``engines.physical_experts``);
  with attention DP the dispatch is DeepEP's, as the estimate prices it: ``--all2all-backend
  deepep_high_throughput`` (decode servers ``deepep_low_latency``).
* An engine over several nodes: ``--nnodes N --node-rank k --master-addr HEAD --master-port 29501`` (the
  nodes after the first ``--headless``); with ``dp > 1`` the DP ranks split over the nodes instead:
  ``--data-parallel-size-local``, ``--data-parallel-start-rank``, ``--data-parallel-address``,
  ``--data-parallel-rpc-port``.
* Weights: read from the checkpoint where it holds them (vLLM detects AWQ, GPTQ, fp8, compressed-tensors,
  ModelOpt and MXFP4 from its config; ``--quantization fp8`` would be rejected on a compressed-tensors or
  AWQ checkpoint), else quantized at load with vLLM's online schemes (``fp8_per_tensor``, ``nvfp4_per_token``).
* Memory: ``--gpu-memory-utilization`` is the budget the plan's batch was checked against (it caps weights,
  activations, CUDA graphs and KV cache together); ``--max-num-seqs`` the batch limit per DP rank;
  ``--max-num-batched-tokens`` the prefill chunk; ``--max-model-len`` the context length with slack.
* Disaggregated plans: ``--kv-transfer-config`` with the NIXL connector (kv_producer on prefill servers,
  kv_consumer on decode servers), and
  ``vllm-router --vllm-pd-disaggregation`` in front; replicas of an agg plan: ``vllm-router --worker-urls``.
  Each server's NIXL handshake listens on ``VLLM_NIXL_SIDE_CHANNEL_PORT`` plus its rank (the DP index, or
  dp_rank * tp + tp_rank in earlier releases; default base 5600 for every server), so servers sharing a node
  get bases ``2 * GPUs`` apart (a server of w GPUs claims fewer than 2w ports in any of those schemes), and
  ``VLLM_NIXL_SIDE_CHANNEL_HOST`` is the node's address, which the other side connects to (default localhost).
"""

from __future__ import annotations

import json
from typing import Mapping

from ...errors import InputError
from ...serving.checkpoint import how
from ...serving.engines import redundant_experts
from . import shell
from .serve_common import (
    ROUTER_PORT,
    EngineSlot,
    ServeContext,
    addr,
    placement,
    port_of,
    render_script,
    url,
)

RELEASE = "vLLM 0.33"
SCRIPT = "serve_vllm.sh"
MASTER_PORT = 29501
DP_RPC_PORT = 13345
NIXL_SIDE_CHANNEL_PORT = 5600  # vLLM's default base of the NIXL handshake ports
# weights -> the online scheme that makes them from a bf16 checkpoint
ONLINE: Mapping[str, str] = {"fp8": "fp8_per_tensor", "fp4": "nvfp4_per_token"}
# the NIXL connector with a role per side (kv_both is deprecated for it in 0.33)
NIXL = {role: json.dumps({"kv_connector": "NixlConnector", "kv_role": kv_role}, separators=(",", ":"))
        for role, kv_role in (("prefill", "kv_producer"), ("decode", "kv_consumer"))}


def refusals(ctx: ServeContext) -> list[str]:
    """What of the plan vLLM 0.33 cannot express (empty: it can)."""
    out = []
    for name, pool in zip(("prefill_", "decode_"), ctx.plan.pools()):
        prefix = name if ctx.plan.disaggregated else ""
        if ctx.model.is_moe and pool.ep not in (1, pool.tp * pool.dp):
            out.append(f"{prefix}ep={pool.ep}: vLLM's expert parallelism spans all tp*dp = {pool.tp * pool.dp} GPUs "
                       "of an engine (--enable-expert-parallel) or none")
        width = pool.tp * pool.pp * pool.dp
        if pool.dp > 1 and width > ctx.gpus_per_node and (pool.tp * pool.pp > ctx.gpus_per_node
                                                           or ctx.gpus_per_node % (pool.tp * pool.pp)):
            out.append(f"{prefix}dp={pool.dp} over nodes needs whole tp*pp groups on each node")
        if pool.dp > 1 and width > ctx.gpus_per_node and not ctx.model.is_moe:
            out.append(f"{prefix}dp={pool.dp} over nodes: vLLM runs dense data parallelism inside a node (use replicas)")
        if pool.dp > 1 and width <= ctx.gpus_per_node and not ctx.model.is_moe and pool.pp > 1:
            out.append(f"{prefix}dp with pp: use replicas")
    return list(dict.fromkeys(out))


def quantization_flags(ctx: ServeContext) -> tuple[list[shell.Group], str]:
    w = ctx.plan.weights
    source = how(w, ctx.checkpoint, "vllm", ctx.model.is_moe, fp4_cores=ctx.fp4_cores)
    if source == "online":
        return [("--quantization", ONLINE[w])], f"{w} weights quantized at load from the bf16 checkpoint ({ONLINE[w]})"
    if w == "bf16":
        note = "bf16 weights" if source == "checkpoint" else f"bf16 weights: point MODEL at a bf16 checkpoint (--checkpoint is {ctx.checkpoint})"
        return [("--dtype", "bfloat16")], note
    if source == "checkpoint":
        return [], f"{w} weights read from the {ctx.checkpoint} checkpoint (vLLM detects the scheme from its config)"
    return [], (f"{w} weights: THIS PLAN NEEDS A PRE-QUANTIZED {w.upper()} CHECKPOINT (--checkpoint is {ctx.checkpoint}); "
                "point MODEL at one and vLLM detects its scheme")


def nixl_side_channel(slot: EngineSlot, node: int) -> list[shell.Group]:
    """The environment of a disaggregated server's NIXL handshake on ``node`` (module docstring): its own block of
    ports on the node, from its first local GPU, and the node's address for the other side to connect to."""
    base = NIXL_SIDE_CHANNEL_PORT + 2 * (slot.first_gpu % slot.gpus_per_node)
    return [(shell.Raw(f"VLLM_NIXL_SIDE_CHANNEL_HOST={addr(node)}"),),
            (shell.Raw(f"VLLM_NIXL_SIDE_CHANNEL_PORT={int(base)}"),)]


def vllm_command(ctx: ServeContext, slot: EngineSlot, rank: int, slots: list[EngineSlot]) -> list[shell.Group]:
    p, pool = ctx.plan, slot.pool
    groups: list[shell.Group] = nixl_side_channel(slot, slot.nodes[rank]) if p.disaggregated else []
    groups.append(("vllm", "serve", shell.Raw('"$MODEL"')))
    if ctx.remote_code:  # the repository's own tokenizer or model code (Kimi, MiniMax): refused without it
        groups.append(("--trust-remote-code",))
    groups.append(("--tensor-parallel-size", pool.tp))
    groups.append(("--pipeline-parallel-size", pool.pp))
    if pool.dp > 1:
        groups.append(("--data-parallel-size", pool.dp))
    if ctx.model.is_moe and pool.ep > 1:
        groups.append(("--enable-expert-parallel",))
        redundant = redundant_experts(ctx.model.moe.n_experts, pool.ep)
        if redundant:  # ep does not divide the experts: EPLB fills each rank with copies of the busiest ones
            groups.append(("--enable-eplb",))
            groups.append(("--eplb-config", json.dumps({"num_redundant_experts": redundant})))
        if pool.dp > 1:
            # the estimate prices DeepEP's dispatch and combine (a token sent once to each rank holding its
            # experts); vLLM's default backend gathers every token to every rank and reduce-scatters back.
            # High-throughput kernels for prefill (and an aggregated engine's chunks), low-latency for decode
            groups.append(("--all2all-backend",
                           "deepep_low_latency" if slot.role == "decode" else "deepep_high_throughput"))
    groups += quantization_flags(ctx)[0]
    groups.append(("--kv-cache-dtype", "fp8" if p.kv == "fp8" else "auto"))
    per_rank = max(p.max_batch // pool.dp, 1)
    groups.append(("--max-num-seqs", per_rank))
    if ctx.prefill_tokens:
        groups.append(("--max-num-batched-tokens", max(ctx.prefill_tokens, per_rank)))
    groups.append(("--max-model-len", ctx.context_length))
    if ctx.memory_flag(slot.role) is not None:
        groups.append(("--gpu-memory-utilization", f"{ctx.memory_flag(slot.role):g}"))
    if slot.multi_node:
        nodes = len(slot.nodes)
        if pool.dp > 1:
            local = pool.dp // nodes
            groups.append(("--data-parallel-size-local", local))
            groups.append(("--data-parallel-address", addr(slot.head)))
            groups.append(("--data-parallel-rpc-port", DP_RPC_PORT))
            if rank:
                groups.append(("--data-parallel-start-rank", rank * local))
        else:
            groups.append(("--nnodes", nodes))
            groups.append(("--node-rank", rank))
            groups.append(("--master-addr", addr(slot.head)))
            groups.append(("--master-port", MASTER_PORT))
        if rank:
            groups.append(("--headless",))
    if p.disaggregated:
        groups.append(("--kv-transfer-config", NIXL[slot.role]))
    if not rank:
        groups.append(("--port", port_of(slot, slots)))
    return groups


def router_command(ctx: ServeContext, slots: list[EngineSlot]) -> list[shell.Group]:
    groups: list[shell.Group] = [("vllm-router",), ("--host", "0.0.0.0"), ("--port", ROUTER_PORT)]
    if ctx.plan.disaggregated:
        groups.append(("--vllm-pd-disaggregation",))
        groups += [("--prefill", url(s, slots)) for s in slots if s.role == "prefill"]
        groups += [("--decode", url(s, slots)) for s in slots if s.role == "decode"]
    else:
        groups.append(("--worker-urls", *(url(s, slots) for s in slots)))
    return groups


def render(ctx: ServeContext) -> dict[str, str]:
    reasons = refusals(ctx)
    if reasons:
        raise InputError("vLLM 0.33 cannot express this plan: " + "; ".join(reasons) + ". SGLang can run other EP "
                         "widths (--format sglang)", field="--format")
    placement(ctx.plan, ctx.gpus_per_node)
    notes = [f"weights: {quantization_flags(ctx)[1]}"]
    if ctx.engine_note:
        notes.extend(ctx.engine_note.split("\n"))
    return {SCRIPT: render_script(RELEASE, ctx, notes, vllm_command, router_command, SCRIPT)}
