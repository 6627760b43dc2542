"""What the vLLM and SGLang launch scripts share: the context, where each engine runs, the script's shape.

A serve plan becomes engines on nodes (``placement``): each replica's engines (agg: one engine of
``tp * pp * dp`` GPUs; disagg: its prefill engines, then its decode engines) take GPUs in order, node by
node.  An engine no larger than a node gets ``CUDA_VISIBLE_DEVICES`` of its node's local GPU numbers
(``0..7`` on every node); a larger one spans whole nodes and gets the engine's multi-node flags.

The script runs on every node (``NODE_RANK=k``; ``NODE_ADDRS="addr0 addr1 ..."`` names the nodes,
node 0 first) and starts that node's engines in the background; node 0 also starts the router when
there is more than one server (replicas, or a disaggregated system).  Every value is shell-quoted
(``shell.py``); the only unquoted text is fixed fragments built from integers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ...errors import InputError
from ...inputs.modelspec import ModelSpec
from ...serving.plan import Pool, ServePlan
from ..tables import number_text
from . import shell

BASE_PORT = 8000
ROUTER_PORT = 30000
CONTEXT_ROUND = 1024  # the context length is rounded up to this many tokens
CONTEXT_SLACK = 1.25  # and leaves this much room over the planned prompt + output (lengths vary around it)


@dataclass(frozen=True)
class ServeContext:
    """A serve plan and what its launch script needs."""

    plan: ServePlan
    model: ModelSpec
    hardware: str
    gpus_per_node: int
    max_model_len: int  # prompt + output tokens the plan was estimated for
    model_path: str | None = None  # Hugging Face name or folder [default: the spec name]
    checkpoint: str = "bf16"
    fp4_cores: bool = False  # the GPU has FP4 tensor cores (online NVFP4 quantization needs them)
    memory_fraction: float | None = None  # the engine's memory flag (None: the engine's own default rule)
    prefill_memory_fraction: float | None = None  # a disaggregated plan's prefill engines' flag (None: as above)

    def memory_flag(self, role: str) -> float | None:
        """The memory flag of an engine of ``role``: prefill engines of a disaggregated plan have their own."""
        if role == "prefill" and self.prefill_memory_fraction is not None:
            return self.prefill_memory_fraction
        return self.memory_fraction
    prefill_tokens: int | None = None  # prefill token budget per step (chunked prefill)
    remote_code: bool = False  # the model loads only with --trust-remote-code (serving.checkpoint.needs_remote_code)
    estimate: Mapping | None = None
    engine_note: str = ""
    load: str = ""  # the load the estimate is for, in words (ServeWorkload.load_text)
    gpu_memory_gib: float | None = None  # the GPU's memory (SGLang sizes its default CUDA-graph batch by it)
    kv_page_tokens: float = 1.0  # SGLang's default KV page for the model on the GPU (engines.sglang_kv_page_tokens)
    searched: bool = True  # the plan is a search's (False: a plan string the user gave, with its own targets)
    needs_checkpoint: bool = False  # the plan's weights need another checkpoint than --checkpoint (checkpoint.how)
    scale_up_gpus: int = 0  # GPUs one NVLink domain joins (a node on HGX, 72 on an NVL72 rack); 0: the node
    label: str | None = None  # what the header calls the model (the Hugging Face id typed); None: the spec's name

    @property
    def context_length(self) -> int:
        """Context length with slack, within the model's own limit."""
        want = -(-int(self.max_model_len * CONTEXT_SLACK) // CONTEXT_ROUND) * CONTEXT_ROUND
        limit = self.model.max_seq_len
        if limit:
            want = min(want, limit)
        return max(want, self.max_model_len)


@dataclass(frozen=True)
class EngineSlot:
    """One engine (one server) of the plan and the GPUs it runs on."""

    role: str  # "engine", "prefill" or "decode"
    replica: int
    index: int  # within its role and replica
    pool: Pool
    first_gpu: int  # global GPU number of its first GPU
    gpus_per_node: int
    port: int = 0  # API port: BASE_PORT + the engines before it whose head is on the same node (placement sets it)

    @property
    def gpus(self) -> int:
        return self.pool.gpus_per_engine

    @property
    def nodes(self) -> list[int]:
        first = self.first_gpu // self.gpus_per_node
        last = (self.first_gpu + self.gpus - 1) // self.gpus_per_node
        return list(range(first, last + 1))

    @property
    def head(self) -> int:
        return self.nodes[0]

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1

    def devices(self) -> str:
        local = self.first_gpu % self.gpus_per_node
        return ",".join(str(d) for d in range(local, local + min(self.gpus, self.gpus_per_node)))

    @property
    def label(self) -> str:
        name = {"engine": "server", "prefill": "prefill server", "decode": "decode server"}[self.role]
        return f"replica {self.replica + 1}, {name} {self.index + 1}"


def placement(plan: ServePlan, gpus_per_node: int) -> list[EngineSlot]:
    """Every engine of the plan, in GPU order; an engine that would straddle two nodes is an error."""
    slots: list[EngineSlot] = []
    gpu = 0
    prefill, decode = plan.pools()
    for r in range(plan.replicas):
        members = ([("engine", 0, decode)] if not plan.disaggregated else
                   [("prefill", i, prefill) for i in range(prefill.workers)]
                   + [("decode", i, decode) for i in range(decode.workers)])
        members.sort(key=lambda m: -m[2].gpus_per_engine)  # the largest first: no engine straddles nodes
        for role, index, pool in members:
            width = pool.gpus_per_engine
            offset = gpu % gpus_per_node
            if (width <= gpus_per_node and offset + width > gpus_per_node) or (width > gpus_per_node and
                                                                               (offset or width % gpus_per_node)):
                raise InputError(f"an engine of {width} GPUs cannot start at GPU {offset} of a {gpus_per_node}-GPU "
                                 "node; choose pools whose engines tile whole nodes", field="--plan")
            slots.append(EngineSlot(role, r, index, pool, gpu, gpus_per_node))
            gpu += width
    slots.sort(key=lambda s: (s.first_gpu))
    # ports in one pass (counting per head node), not a scan of every engine per engine: 100,000 GPUs emit at once
    before: dict[int, int] = {}
    numbered = []
    for slot in slots:
        head = slot.head
        numbered.append(dataclasses.replace(slot, port=BASE_PORT + before.get(head, 0)))
        before[head] = before.get(head, 0) + 1
    return numbered


def port_of(slot: EngineSlot, slots: list[EngineSlot]) -> int:
    """API port: BASE_PORT + the number of engines before it whose head is on the same node."""
    del slots  # numbered once by placement
    return slot.port


def addr(node: int) -> shell.Raw:
    return shell.Raw(f'"${{ADDR[{int(node)}]}}"')


def url(slot: EngineSlot, slots: list[EngineSlot]) -> shell.Raw:
    return shell.Raw(f'"http://${{ADDR[{int(slot.head)}]}}:{int(port_of(slot, slots))}"')


CommandFor = Callable[[ServeContext, EngineSlot, int, list[EngineSlot]], list[shell.Group]]


def _ms(value: Any, spec: str) -> str:
    """A latency in ms; none or infinite: the queue grows without bound (the load exceeds what the plan serves)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return "unbounded (the load exceeds what the plan serves)"
    return f"{value:,{spec}} ms"


def _model_required(ctx: ServeContext) -> str:
    """The line that stops the script when MODEL is unset: autotune knows the architecture, not the weights."""
    from ...inputs.catalogue import ids_of_spec
    from ...serving.checkpoint import SOURCES, held_weights

    # the catalogue's ids of this spec whose checkpoint holds the weights the plan runs (fp4 = NVFP4): those
    # --checkpoint names, or, for a plan that needs another checkpoint, the plan's own
    held = ctx.plan.weights if ctx.needs_checkpoint else held_weights(ctx.checkpoint)
    examples = ids_of_spec(ctx.model.name, {"fp4": "nvfp4"}.get(held, held))
    example = f" (e.g. MODEL={examples[0]})" if examples else ""
    which = (f"in {SOURCES[held]}, which this plan needs (--checkpoint is {ctx.checkpoint})" if ctx.needs_checkpoint
             else f"({ctx.checkpoint} checkpoint)")
    message = (f"MODEL must name the {ctx.model.name} weights to serve {which}, a Hugging Face id "
               f"or a local folder{example}; or emit with --model-path")
    return f'if [[ -z "${{MODEL:-}}" ]]; then echo {shell.word(message)} >&2; exit 2; fi'


def render_script(release: str, ctx: ServeContext, notes: list[str], command_for: CommandFor,
                  router_for: Callable[[ServeContext, list[EngineSlot]], list[shell.Group]], script_name: str) -> str:
    """The bash script ``script_name`` that starts, on the node it runs on, that node's engines (and on node 0
    the router)."""
    p = ctx.plan
    slots = placement(p, ctx.gpus_per_node)
    n_nodes = max(s.nodes[-1] for s in slots) + 1
    lines = ["#!/usr/bin/env bash"]
    lines += shell.comment_lines(_header(release, ctx, notes, slots, n_nodes, script_name))
    lines += ["set -euo pipefail", ""]
    if ctx.model_path:
        lines.append(shell.default_assignment("MODEL", ctx.model_path))
    else:
        # a bundled spec's name or a spec file is not weights an engine can load: MODEL must say which
        lines.append(_model_required(ctx))
    lines += [shell.default_assignment("NODE_RANK", 0), shell.default_assignment("NODE_ADDRS", "localhost"),
              'read -r -a ADDR <<< "$NODE_ADDRS"']
    if n_nodes > 1:
        lines += [f'if (( ${{#ADDR[@]}} < {n_nodes} )); then echo "NODE_ADDRS must name {n_nodes} nodes, node 0 first" >&2; exit 2; fi']
    lines += ["", 'case "$NODE_RANK" in']
    on_node: dict[int, list[EngineSlot]] = {}  # one pass: the engines with a process on each node
    for slot in slots:
        for node in slot.nodes:
            on_node.setdefault(node, []).append(slot)
    for node in range(n_nodes):
        lines.append(f"{node})")
        body: list[str] = []
        for slot in on_node.get(node, []):
            rank = slot.nodes.index(node)
            body += shell.comment_lines([slot.label + (f", node {rank + 1} of {len(slot.nodes)}" if slot.multi_node
                                                        else "")])
            groups = [(shell.Raw("CUDA_VISIBLE_DEVICES=" + shell.word(slot.devices())),)] + command_for(ctx, slot, rank,
                                                                                                        slots)
            cmd = shell.command(groups)
            cmd[-1] = cmd[-1] + " &"
            body += cmd
        if node == 0 and len(slots) > 1:
            body += shell.comment_lines(["the router: one endpoint in front of the servers (it waits for them to be healthy)"])
            cmd = shell.command(router_for(ctx, slots))
            cmd[-1] = cmd[-1] + " &"
            body += cmd
        lines += ["    " + line for line in body] + ["    ;;"]
    lines += [f'*) echo "NODE_RANK must be 0..{n_nodes - 1}" >&2; exit 2;;', "esac", "wait"]
    return "\n".join(lines) + "\n"


def _header(release: str, ctx: ServeContext, notes: list[str], slots: list[EngineSlot], n_nodes: int,
            script_name: str) -> list[str]:
    p = ctx.plan
    lines = [f"Written by autotune for {release}. Edit freely; rerun `autotune emit` to regenerate.",
             f"model: {ctx.label or ctx.model.name}; hardware: {ctx.hardware}; plan: {p.as_string()}",
             f"{p.layout()}: {len(slots)} server(s) on {n_nodes} node(s) of {ctx.gpus_per_node} GPUs; context "
             f"length {ctx.context_length} tokens (planned prompt + output {ctx.max_model_len}, with slack)"]
    if ctx.estimate:
        e = ctx.estimate
        at = f" at {ctx.load}" if ctx.load else ""
        lines.append(f"predicted{at}: {number_text(e['output_tokens_per_s'], ',.0f')} output tokens/s in total, TTFT "
                     f"{_ms(e.get('ttft_ms'), '.0f')}, TPOT {_ms(e.get('tpot_ms'), '.1f')} (autotune's analytic serving "
                     f"model); {e.get('memory_gib_per_gpu', 0):.1f} GiB per GPU of the engine's budget")
        if e.get("misses"):  # said where the user will look
            # a search's plan is the closest it found; a plan string was given, not found, so no search stands behind it
            closest = "; it is the closest plan found, not one that meets them" if ctx.searched else ""
            lines.append(f"WARNING: this plan MISSES the targets ({e['misses']}){closest}")
    lines += notes
    if n_nodes > 1:
        lines.append(f"Run this script on each of the {n_nodes} nodes: NODE_RANK=k NODE_ADDRS='addr0 addr1 ...' "
                     f"bash {script_name} (k = 0 .. nodes-1; the addresses of every node, node 0 first).")
    if len(slots) > 1:
        lines.append(f"Clients talk to the router on node 0, port {ROUTER_PORT}.")
    domain = max(ctx.scale_up_gpus, ctx.gpus_per_node)
    if p.disaggregated and p.replicas > 1 and p.gpus_per_replica <= domain < p.n_gpus:
        # the estimate prices a replica's KV hand-off over NVLink when the replica is inside one NVLink domain
        # (estimate.py); one router pairs any prefill server with any decode server, so most hand-offs cross
        # replicas, and domains when the deployment spans several (not when all of it is one NVL72 rack)
        lines.append(f"NOTE: the router pairs any prefill server with any decode server of the {p.replicas} replicas, "
                     "so a KV hand-off may cross nodes, over the network, where the estimate prices it inside one "
                     "replica; to keep it there, run one router per replica, each listing only its replica's servers.")
    return lines
