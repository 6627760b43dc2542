"""The serving engines: the releases autotune plans for, their defaults and their memory budget rules.

Each engine decides how much memory its KV cache gets, by its own rule (``kv_pool_bytes``):

* **vLLM** (0.33) ``--gpu-memory-utilization u`` caps *everything*: the KV cache gets
  ``u * memory - weights - non-torch memory - peak activations - CUDA graphs`` (vllm/v1/worker/
  gpu_worker.py ``determine_available_memory``: the profile run with ``max_num_batched_tokens``
  tokens measures the activation peak; CUDA-graph memory is estimated and taken off since v0.21).
  Default ``u`` 0.92 (what ``vllm serve`` 0.33 resolves with no flag).
* **SGLang** (0.5.23) ``--mem-fraction-static f`` caps *weights plus KV cache*: the KV pool is
  ``f * memory - weights``; activations and CUDA graphs live in the rest.  Its default is
  ``(memory - reserved) / memory`` with ``reserved = 512 MiB + 1.5 MiB per chunked-prefill token +
  1 GiB per 8 GPUs of tp*pp + the CUDA-graph reserve`` (2 MiB per decode graph batch, more with
  attention DP), at least 10 GiB on GPUs over 60 GiB (sglang/srt/arg_groups/memory_hook.py).
  autotune computes the same reserve, raised to its own activation estimate where that is larger,
  and emits the fraction explicitly.
* **TensorRT-LLM** ``kv_cache_config.free_gpu_memory_fraction`` (0.9) of the memory left after
  weights and activations.

Activations (``activation_bytes``) are the forward pass of one chunk of ``chunk_tokens`` tokens:
hidden state, residual and norm output (3h), the QKV projection and attention output, the MLP's
gate/up/activation (3 x ffn / tp, or for MoE the dispatched ``topk`` copies and their expert
intermediates), plus the sampler's fp32 logits of ``max_batch`` rows (twice: logits and
probabilities).  CUDA graphs (``cuda_graph_bytes``): a pool per captured batch size, modelled as
24 MiB per layer-of-graphs block plus the decode activations of the largest captured batch.
Non-torch memory: CUDA context and NCCL buffers, 0.75 GiB plus 0.5 GiB with any parallelism.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

GIB = float(2**30)
MIB = float(2**20)

ENGINES = ("vllm", "sglang", "trtllm")
RELEASES: Mapping[str, str] = {"vllm": "vLLM 0.33", "sglang": "SGLang 0.5.23", "trtllm": "TensorRT-LLM 1.x"}
# The MAJOR.MINOR releases an engine has had, as ``--engine NAME@X.Y`` accepts them: from its first tagged release
# on GitHub (vLLM v0.1.0, June 2023; SGLang v0.1, January 2024; TensorRT-LLM v0.5.0, October 2023) to the newest
# autotune knows (the emitters' vLLM 0.33 and SGLang 0.5.23; TensorRT-LLM 1.3, the newest in serving_silicon.csv).
RELEASE_SPAN: Mapping[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "vllm": ((0, 1), (0, 33)), "sglang": ((0, 1), (0, 5)), "trtllm": ((0, 5), (1, 3))}
DEFAULT_ENGINE = "vllm"
# The most tokens a request, or users in flight, a measured row may state (both serving readers): past any engine's
# context and any benchmark's load, a larger number is a unit slip.
MAX_LENGTH = 10_000_000


# DeepEP's internode low-latency kernels count a rank pair's tokens below 1,024: SGLang's launch files run the normal
# kernels above it (outputs/emit/sglang.py), and the decode estimate prices what they run.
DEEPEP_LL_MAX_TOKENS = 1024

@dataclass(frozen=True)
class EngineDefaults:
    """What an engine does when the command leaves it to the engine."""

    name: str
    memory_knob: str  # the flag that sets the budget
    memory_fraction: float | None  # default of that knob; None: computed (SGLang)
    mixed_prefill: bool  # prefill chunks ride in the same steps as decodes (chunked prefill)
    # the attention-DP ranks of a MoE engine step in lockstep, each on its own schedule, so a prefill chunk on
    # one rank holds the step of every rank (SGLang gathers the ranks' batches every step and runs idle
    # batches on the others, scheduler_dp_attn_mixin / prepare_mlp_sync_batch; vLLM's DP engines run dummy
    # batches to keep the MoE collectives in step). TensorRT-LLM's attention-DP balance, which NVIDIA's
    # recipes enable, holds context requests until the ranks schedule them together instead.
    adp_lockstep: bool = False
    # TensorRT-LLM's attention-DP balance (attention_dp_config: enable_balance true, timeout_iters 60,
    # batching_wait_iters 0 in NVIDIA's and InferenceX's recipes): while every rank decodes, a context request
    # waits until every rank has one, for at most this many iterations since the last context release
    # (tensorrt_llm/_torch/pyexecutor, _balance_adp_requests). 0: no such wait.
    adp_balance_timeout_iters: float = 0.0
    # the MoE dispatch sends a token once per rank holding its experts (DeepEP) only when expert parallelism spans
    # the whole attention-DP engine (ep = tp*dp): SGLang's --moe-a2a-backend deepep sets ep to the engine's size,
    # and below it the default backend gathers every token to every GPU (and reduce-scatters the result back)
    dedup_needs_full_ep: bool = False
    # a model of full and sliding-window layers: SGLang splits its KV pool into a full-attention pool and a
    # sliding-window pool of swa_full_tokens_ratio times as many tokens (--swa-full-tokens-ratio, 0.8 by default;
    # sglang/srt/model_executor/model_runner_kv_cache_mixin.py set_num_tokens_hybrid_swa), whatever the window;
    # None: a sliding layer's pages hold its window of each sequence (vLLM's hybrid KV-cache manager)
    swa_full_tokens_ratio: float | None = None

    def decode_dispatch_per_island(self, disagg, per_rank_batch):
        """1.0 where a decode step's DeepEP dispatch runs the normal (high-throughput) kernels, one RDMA copy per
        remote node (``estimate.dispatch_copies_by_link``), else 0.0 (low-latency kernels, one per remote GPU), as
        the launch files choose them: vLLM's aggregated engine --all2all-backend deepep_high_throughput (its
        decode servers deepep_low_latency); SGLang --deepep-mode auto (low-latency for decode batches) up to
        ``DEEPEP_LL_MAX_TOKENS`` sequences a rank, normal above it."""
        disagg = np.asarray(disagg, bool)
        if self.name == "vllm":
            return np.where(disagg, 0.0, 1.0)
        if self.name == "sglang":
            return np.where(np.asarray(per_rank_batch, float) > DEEPEP_LL_MAX_TOKENS, 1.0, 0.0)
        return np.zeros(np.shape(disagg))

    def gathers(self, tp, dp, ep):
        """1.0 where the MoE dispatch of an attention-DP pool gathers every token to every GPU, else 0.0."""
        full = np.asarray(ep) >= np.asarray(tp) * np.asarray(dp)
        return np.where(self.dedup_needs_full_ep & ~full, 1.0, 0.0)

    def chunk_tokens(self, memory_gib: float, gpu: str = "") -> float:
        """Prefill token budget per step (vLLM max_num_batched_tokens, SGLang chunked_prefill_size,
        TensorRT-LLM max_num_tokens) for a GPU of ``memory_gib`` named ``gpu`` (its profile's name)."""
        if self.name == "vllm":
            return 16384.0 if memory_gib >= 160 else (8192.0 if _vllm_large_tier(memory_gib, gpu) else 2048.0)
        if self.name == "sglang":
            return 16384.0 if memory_gib >= 160 else (8192.0 if memory_gib >= 60 else 4096.0)
        return 8192.0

    def server_chunk(self, memory_gib: float, dp, gpu: str = "", *, moe, page=1.0):
        """The prefill token budget a server is launched with (vLLM max_num_batched_tokens, SGLang
        chunked_prefill_size), per engine of ``dp`` ranks; ``page`` the KV page SGLang's attention kernels use on
        the GPU (``sglang_kv_page_tokens``).  SGLang gives each attention-DP rank ``chunk // dp`` tokens and
        refuses to start where that is not a whole number of pages, so its budget is taken down to ``dp`` ranks of
        whole pages (``sglang_server_chunk``)."""
        chunk = self.chunk_tokens(memory_gib, gpu) * np.ones_like(np.asarray(dp, float))
        if self.name == "sglang":
            return sglang_server_chunk(chunk, dp, moe=moe, page=page)
        return chunk

    def prefill_chunk(self, memory_gib: float, dp, gpu: str = "", *, moe, page=1.0) -> float:
        """Prefill tokens per step of one DP rank: SGLang divides ``chunked_prefill_size`` by the attention-DP
        width (sglang/srt/arg_groups/parallel_hook.py, "DP attention is enabled. chunked prefill size is
        adjusted"), which a MoE engine's dp is; a dense engine's --dp-size ranks are schedulers of their own with
        the whole budget, as vLLM's and TensorRT-LLM's ranks are."""
        chunk = self.server_chunk(memory_gib, dp, gpu, moe=moe, page=page)
        if self.name == "sglang":
            width = np.where(np.asarray(moe, dtype=bool), np.maximum(dp, 1.0), 1.0)
            return np.maximum(np.floor(chunk / width), 1.0)
        return chunk

    def max_batch(self, memory_gib: float, gpu: str = "") -> int:
        """Sequences in flight per engine rank by default (vLLM max_num_seqs, SGLang max_running_requests,
        TensorRT-LLM max_batch_size)."""
        if self.name == "vllm":
            return 1024 if memory_gib >= 160 or _vllm_large_tier(memory_gib, gpu) else 256
        return 2048


# SGLang 0.5.23 runs TensorRT-LLM's attention kernels by default on compute capability 10.x (B200, B300, GB200,
# GB300: trtllm_mha, and trtllm_mla for DeepSeek's MLA; arg_groups/model_override_base.py), whose KV pages hold 64
# tokens (arg_groups/overrides.py sets page_size 64 for them); elsewhere its default page is one token
SGLANG_SM100_KV_PAGE_TOKENS = 64
# DeepSeek sparse attention (an indexer config: GLM-5, DeepSeek-V3.2) runs SGLang's dsa backend on every CUDA GPU,
# Hopper included, with pages of 64 x index_kpool tokens (arg_groups/model_overrides/deepseek_v2.py: "Setting page
# size to 64 for DeepSeek DSA"; index_kpool defaults to 1, and no config here sets it)
SGLANG_DSA_KV_PAGE_TOKENS = 64


def sglang_kv_page_tokens(compute_capability, *, dsa: bool = False) -> float:
    """Tokens of one KV page under SGLang's default attention backend on a GPU of ``compute_capability``, for a model
    with DeepSeek sparse attention where ``dsa`` (64 on any GPU).  None (a profile that does not state it): taken as
    the 64-token page, since a rank's chunk of whole 64-token pages is also whole 1-token pages, so the launch file
    starts on whatever GPU the profile describes (one token would leave a Blackwell profile without the field a
    chunk SGLang refuses)."""
    if dsa:
        return float(SGLANG_DSA_KV_PAGE_TOKENS)
    cc = compute_capability
    if cc is None:
        return float(SGLANG_SM100_KV_PAGE_TOKENS)
    return float(SGLANG_SM100_KV_PAGE_TOKENS) if 10.0 <= float(cc) < 11.0 else 1.0


def model_kv_page_tokens(model, hardware) -> float:
    """:func:`sglang_kv_page_tokens` of a model (its DeepSeek sparse attention, if any) on a hardware profile."""
    return sglang_kv_page_tokens(hardware.compute_capability, dsa=model.dsa is not None)


def sglang_server_chunk(chunk, dp, *, moe, page=1.0):
    """SGLang's ``--chunked-prefill-size`` for an engine of ``dp`` ranks: ``chunk`` as it stands, unless attention DP
    (a MoE engine's dp > 1) leaves a rank a share ``chunk // dp`` that is not whole KV pages of ``page`` tokens:
    then ``dp`` times that share taken down to whole pages (one page at least), since SGLang asserts that a rank's
    chunk is a multiple of the page (arg_groups/validation_hook.py, "chunked_prefill_size must be divisible by
    page_size"): 16,384 tokens over DP72 on GB200 (227 a rank, pages of 64) would not start, 13,824 (192) does."""
    chunk = np.asarray(chunk, dtype=np.float64)
    dp = np.maximum(np.asarray(dp, dtype=np.float64), 1.0)
    page = np.maximum(np.asarray(page, dtype=np.float64), 1.0)
    share = np.floor(chunk / dp)
    whole = np.maximum(np.floor(share / page), 1.0) * page
    rounded = np.asarray(moe, dtype=bool) & (dp > 1) & (whole != share)
    return np.where(rounded, whole * dp, chunk)


def _vllm_large_tier(memory_gib: float, gpu: str) -> bool:
    """vLLM 0.33's larger serving defaults (8,192 batched tokens, 1,024 sequences) below 160 GiB: GPUs of 70 GiB or
    more except the A100, where a larger max_num_batched_tokens lowered throughput (vllm/engine/arg_utils.py,
    EngineArgs.get_batch_defaults: '"a100" not in device_name'; its GB10 exception has no profile here)."""
    return memory_gib >= 70 and "a100" not in gpu.lower()


DEFAULTS: Mapping[str, EngineDefaults] = {
    "vllm": EngineDefaults("vllm", "--gpu-memory-utilization", 0.92, True, adp_lockstep=True),
    "sglang": EngineDefaults("sglang", "--mem-fraction-static", None, False, adp_lockstep=True,
                             dedup_needs_full_ep=True, swa_full_tokens_ratio=0.8),
    "trtllm": EngineDefaults("trtllm", "kv_cache_config.free_gpu_memory_fraction", 0.90, True,
                             adp_balance_timeout_iters=60.0),
}


def engine_family(engine: str) -> str:
    """``vllm-0.19`` -> ``vllm``; legacy TensorRT-LLM releases (``trtllm-0.14``) -> ``trtllm``."""
    for name in ENGINES:
        if engine == name or engine.startswith(name + "-"):
            return name
    return DEFAULT_ENGINE


ENGINE_ALIASES = {"tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm"}


def split_engine_cell(text: str | None) -> tuple[str, str]:
    """The ``engine`` cell of a measured file, ``NAME`` or ``NAME@VERSION`` (``TensorRT-LLM@1.0``, ``sglang@0.5.6``), as
    (the name in lower case under its alias, e.g. ``trtllm``; the version as written, '' when none); an empty cell is
    ('', ''), "not recorded".  Whether the name is an engine autotune knows is the reader's to say.  A name or a version
    left empty around the ``@`` (``vllm@``, ``@1.0``), or a second ``@``, raises ValueError: the cell does not say which
    engine or release the row ran.  The one parser of the silicon and serving-runs readers."""
    raw = (text or "").strip()
    name, at, version = raw.partition("@")
    name, version = name.strip().lower(), version.strip()
    if at and (not name or not version or "@" in version):
        what = "its name is empty" if not name else "its version is empty" if not version else "it has more than one @"
        raise ValueError(f"engine must read NAME or NAME@VERSION with neither part empty (e.g. trtllm, sglang@0.5.6), "
                         f"but got (engine={raw!r}): {what}; write the engine's name, and its release after @ only "
                         "where known")
    return ENGINE_ALIASES.get(name, name), version


def parse_engine(text: str) -> tuple[str, str | None]:
    """An engine as a user names it, with its release if stated: ``trtllm`` -> (``trtllm``, None);
    ``trtllm@0.14`` or ``trtllm@0.14.0`` -> (``trtllm``, ``trtllm-0.14``), the release key whose fitted
    parameters apply (``calibrated.params_for``); the memory rule and launch files are the family's."""
    name, at, version = text.strip().lower().partition("@")
    name = ENGINE_ALIASES.get(name, name)
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, optionally with its release as NAME@MAJOR.MINOR "
                         f"(e.g. trtllm@0.14), but got (engine={text!r})")
    if not at:
        return name, None
    # MAJOR.MINOR, then what releases append: .PATCH, rcN, .postN, .devN (a Triton front end is not a release)
    found = re.fullmatch(r"v?(\d{1,3})\.(\d{1,3})(\.\d+)?(rc\d+)?(\.post\d+)?(\.dev\d+)?", version.strip())
    if not found:
        raise ValueError(f"an engine release must read NAME@MAJOR.MINOR (e.g. trtllm@0.14, vllm@0.12.0), but got "
                         f"(engine={text!r})")
    release = (int(found.group(1)), int(found.group(2)))
    first, newest = RELEASE_SPAN[name]
    if not first <= release <= newest:
        label = RELEASES[name].split(" ")[0]
        when = "predates its first release" if release < first else "is newer than the newest release autotune knows"
        raise ValueError(f"{label} {release[0]}.{release[1]} {when}: releases run from {first[0]}.{first[1]} to "
                         f"{newest[0]}.{newest[1]}, but got (engine={text!r}); give one of those, or leave the release "
                         f"out ({name}) for its current parameters")
    return name, f"{name}-{release[0]}.{release[1]}"


def release_key_problem(key: str) -> str | None:
    """Why a release key (``trtllm-0.15``, ``vllm-0.6``, ``trtllm-0.14-triton``: what calibration overlays and
    measured rows are keyed by) names no release autotune plans for; None when it names one (or is a family)."""
    found = re.fullmatch(r"([a-z]+)-(\d+)\.(\d+)(-triton)?", key)
    if key in ENGINES:
        return None
    if not found or found.group(1) not in ENGINES:
        return (f"engine must be one of {', '.join(ENGINES)}, or a release NAME-MAJOR.MINOR of one (e.g. trtllm-0.14), "
                f"but got (engine={key!r})")
    try:
        parse_engine(f"{found.group(1)}@{found.group(2)}.{found.group(3)}")
    except ValueError as exc:
        return str(exc)
    return None


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, but got (engine={engine!r})")
    return engine


# --- memory per GPU (bytes; numpy arrays broadcast over plans or rows) -----------------------------

def physical_experts(n_experts, ep):
    """Expert copies an engine holds over ``ep`` ranks: ``ceil(E/ep) * ep``.  When ``ep`` does not divide the E
    experts the engines fill each rank with redundant copies of the busiest ones (vLLM --enable-eplb with
    eplb_config.num_redundant_experts, SGLang --enable-eplb --ep-num-redundant-experts; DeepSeek's 256 experts
    over 72 ranks hold 288, 4 a rank); when it does, there are none."""
    ep = np.maximum(np.asarray(ep, dtype=np.float64), 1.0)
    return np.ceil(np.asarray(n_experts, dtype=np.float64) / ep) * ep


def redundant_experts(n_experts: int, ep: int) -> int:
    """Redundant expert copies a layout needs (``physical_experts`` minus the model's experts)."""
    return int(physical_experts(n_experts, ep)) - int(n_experts)


def weight_bytes_per_gpu(a, q, tp, pp, dp, ep):
    """Resident weights per GPU: attention, dense MLP and shared experts split over tp and pp; routed
    experts (with their redundant copies, ``physical_experts``) over the engine's tp*dp GPUs of a stage (ep
    groups of experts, each split moe_tp ways);
    embedding and output layer (bf16) split over tp (vocabulary-parallel) and held by the end stages."""
    G = tp * dp
    non_expert = (a["P_attn"] * q["b_attn"] + (a["P_dense"] + a["P_shared"]) * q["b_mlp"]) / (tp * pp)
    experts = a["n_moe"] * physical_experts(a["E"], ep) * a["P_expert"] * q["b_exp"] / (G * pp)
    embed = (a["P_embed"] + a["P_head"]) * 2.0 / tp / np.minimum(pp, 2.0)
    return non_expert + experts + embed + a["P_norm"] * 2.0 / pp


def kv_bytes_per_token(a, kv_b, tp, pp):
    """KV-cache bytes one token of context occupies on one GPU (full and sliding layers; a sliding
    layer's share is bounded by its window, see ``kv_bytes_per_sequence``)."""
    heads = np.maximum(a["n_kv_heads"] / tp, 1.0) / np.maximum(a["n_kv_heads"], 1.0)
    share = np.where(a["kv_split"] > 0, heads, 1.0)
    per_layer = a["kv_elems"] * kv_b * share
    return (a["n_full"] * (per_layer + a["idx_elems"] * 1.0)) / pp, per_layer


def kv_bytes_per_sequence(a, kv_b, tp, pp, tokens):
    """Cache bytes of one sequence of ``tokens`` tokens on one GPU: full layers grow with it, sliding
    layers up to their window, linear layers keep a fixed state."""
    full, per_layer = kv_bytes_per_token(a, kv_b, tp, pp)
    sliding = a["n_swa"] * per_layer * np.minimum(a["window"], tokens) / pp
    state = a["n_lin"] * a["lin_state_bytes"] / np.maximum(tp, 1.0) / pp
    return full * tokens + sliding + state


def swa_pool_ratio(engine: str) -> float:
    """The engine's sliding-window pool size relative to its full-attention pool (``EngineDefaults.
    swa_full_tokens_ratio``), 0.0 where its sliding layers hold only their window (``kv_pool_bytes_per_sequence``)."""
    return float(DEFAULTS[engine_family(engine)].swa_full_tokens_ratio or 0.0)


def kv_pool_bytes_per_sequence(a, kv_b, tp, pp, tokens, swa_ratio=0.0):
    """Bytes of the engine's KV pool that one sequence of ``tokens`` tokens takes on one GPU (the pool divided by
    this is the sequences it holds).

    ``swa_ratio`` 0: the bytes the sequence's cache occupies (``kv_bytes_per_sequence``: sliding layers up to their
    window), as vLLM's hybrid allocator and TensorRT-LLM's per-window pools hand them out.  ``swa_ratio`` r > 0
    (SGLang, ``EngineDefaults.swa_full_tokens_ratio``) for a model of full and sliding layers: the engine sizes a
    full-attention pool of T tokens and a sliding pool of r T tokens from one budget, so a token of the full pool
    costs ``F + r S`` bytes (F and S the bytes per token of all full and of all sliding layers) and a sequence
    takes ``tokens`` of the full pool and ``min(window, tokens)`` of the sliding one, whichever pool runs out
    first: ``(F + r S) max(tokens, min(window, tokens) / r)``.  gpt-oss-120b (18 full, 18 sliding layers): 1.8x the
    full layers' bytes per token at any length past the window, where the occupied bytes approach 1x."""
    occupied = kv_bytes_per_sequence(a, kv_b, tp, pp, tokens)
    full, per_layer = kv_bytes_per_token(a, kv_b, tp, pp)
    sliding = a["n_swa"] * per_layer / pp
    r = np.asarray(swa_ratio, dtype=np.float64)
    split = (r > 0) & (a["n_full"] > 0) & (a["n_swa"] > 0)
    r_safe = np.where(r > 0, r, 1.0)
    state = a["n_lin"] * a["lin_state_bytes"] / np.maximum(tp, 1.0) / pp
    tokens = np.asarray(tokens, dtype=np.float64)
    pooled = (full + r_safe * sliding) * np.maximum(tokens, np.minimum(a["window"], tokens) / r_safe) + state
    return np.where(split, pooled, occupied)


def activation_bytes(a, tokens, tp, dp, ep, max_batch):
    """Peak activation memory per GPU of a forward pass over ``tokens`` tokens (the engine's chunk)."""
    h = a["h"]
    qkv = (a["n_heads"] * a["head_dim"] + 2.0 * a["n_kv_heads"] * a["head_dim"]) / tp
    dense = 3.0 * a["ffn"] / tp
    moe_tp = np.maximum(tp * dp / np.maximum(ep, 1.0), 1.0)
    moe = a["topk"] * (h + 3.0 * a["moe_ffn"] / moe_tp)
    per_token = 3.0 * h + qkv + np.where(a["E"] > 0, np.maximum(moe, dense), dense)
    sampler = 2.0 * np.maximum(max_batch, 1.0) * a["V"] * 4.0
    return tokens * per_token * 2.0 + sampler


def cuda_graph_bytes(a, max_batch, tp, dp, ep):
    captured = np.minimum(np.maximum(max_batch, 1.0), 512.0)
    return 24.0 * MIB * a["L"] / 8.0 + activation_bytes(a, captured, tp, dp, ep, 0.0)


def runtime_bytes(tp, pp, dp, ep):
    parallel = (tp * pp * dp) > 1
    return 0.75 * GIB + np.where(parallel, 0.5 * GIB, 0.0) + np.where((dp > 1) & (ep > 1), 1.0 * GIB, 0.0)


# Which engines of a plan a memory budget is for: an aggregated engine, or a disaggregated plan's prefill or decode
# engines (SGLang reserves for each differently: a prefill server captures no decode graphs)
ROLE_AGG, ROLE_PREFILL, ROLE_DECODE = 0.0, 1.0, 2.0


def _sglang_tp_size(tp, dp, moe):
    """(attention DP on, SGLang's ``--tp-size``): tp*dp with attention DP (a MoE engine's dp), else tp (a dense
    engine's ``--dp-size`` ranks are schedulers of their own)."""
    attn_dp = (np.asarray(dp) > 1) & np.asarray(moe, dtype=bool)
    return attn_dp, np.where(attn_dp, tp * dp, tp)


def sglang_default_graph_batch(tp, dp, memory_bytes, *, moe):
    """SGLang 0.5.23's default largest decode-graph batch a rank (arg_groups/memory_hook.py): 512 on GPUs of 160 GiB
    or more, else 256 under 4 GPUs of ``--tp-size`` and 512 from 4."""
    _, tp_size = _sglang_tp_size(tp, dp, moe)
    return np.where(memory_bytes >= 160 * GIB, 512.0, np.where(tp_size < 4, 256.0, 512.0))


def sglang_graph_batch(tp, dp, max_batch, memory_bytes, *, moe):
    """The largest decode batch a rank's CUDA graphs capture: the default, capped by the sequences a rank runs (the
    launch files pin it there with ``--cuda-graph-max-bs-decode`` under attention DP, whose default cap is the whole
    server's ``--max-running-requests``)."""
    return np.minimum(sglang_default_graph_batch(tp, dp, memory_bytes, moe=moe), np.maximum(max_batch, 1.0))


# SGLang 0.5.23's prefill CUDA-graph token counts (arg_groups/cuda_graph_hook.py
# generate_prefill_cuda_graph_batch_sizes): (first, last, step) runs, the last one open-ended
_SGLANG_PREFILL_GRAPH_RUNS = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256),
                              (4608, math.inf, 512))


def sglang_prefill_graph_count(max_tokens):
    """How many prefill graphs SGLang captures up to ``max_tokens`` tokens (58 for 8,192, 74 for 16,384)."""
    m = np.asarray(max_tokens, dtype=np.float64)
    count = np.zeros_like(m)
    for first, last, step in _SGLANG_PREFILL_GRAPH_RUNS:
        count = count + np.where(m >= first, np.floor((np.minimum(m, last) - first) / step) + 1.0, 0.0)
    return count


# With DeepEP, SGLang 0.5.23 fixes the prefill graphs' token counts before its memory hook runs
# (arg_groups/cuda_graph_hook.py apply_deepep_adjustments: the counts up to its 2,048-token default, each rounded up
# to a multiple of 8), and the memory hook keeps that list: 4..32 in steps of 4 become 8, 16, 24, 32, so 38 graphs
SGLANG_DEEPEP_PREFILL_GRAPH_TOKENS = 2048
SGLANG_DEEPEP_PREFILL_GRAPH_ALIGN = 8


def _sglang_deepep_prefill_graph_count() -> float:
    sizes = [first + k * step for first, last, step in _SGLANG_PREFILL_GRAPH_RUNS
             for k in range(int((min(SGLANG_DEEPEP_PREFILL_GRAPH_TOKENS, last) - first) // step) + 1)
             if first <= SGLANG_DEEPEP_PREFILL_GRAPH_TOKENS]
    align = SGLANG_DEEPEP_PREFILL_GRAPH_ALIGN
    return float(len({-(-s // align) * align for s in sizes}))


def sglang_reserved_bytes(chunk, tp, pp, dp, max_batch, memory_bytes, *, moe, ep=1.0, mla=False, role=ROLE_AGG):
    """SGLang 0.5.23's own default reserve (arg_groups/memory_hook.py: handle_gpu_memory_settings,
    reserve_for_graph_mb, reserve_for_deepep_a2a_mb), in bytes, for the engines of ``role``.  Its ``tp_size`` is the
    engine's ``--tp-size``: tp*dp with attention DP (a MoE engine's dp), but tp for a dense engine's ``--dp-size``,
    whose ranks are separate schedulers, each with the server's arguments and without the attention-DP term.
    ``max_batch`` is a rank's batch limit.

    512 MiB, 1.5 MiB per activation token (the chunked-prefill budget; a decode server's graph batch), 1 GiB
    per 8 GPUs of ``--tp-size``; decode graphs 2 MiB per captured sequence, with attention DP 3 MiB per sequence of
    every DP rank; on engines that prefill without pipeline stages, prefill graphs (8 MiB per captured token count up
    to the server's chunk, 38 counts with DeepEP, 1.5 GiB for MLA models) and 1 GiB more with DeepEP; at least 10 GiB
    on GPUs over 60 GiB; then 2 GiB for DeepEP's buffers on engines that decode."""
    attn_dp, tp_size = _sglang_tp_size(tp, dp, moe)
    role = np.asarray(role, dtype=np.float64)
    decodes = role != ROLE_PREFILL
    graph_bs = sglang_graph_batch(tp, dp, max_batch, memory_bytes, moe=moe)
    # a decode server runs no prefill chunk: SGLang sizes its activations by the running requests, or without
    # --max-running-requests by the graphs' batch (the default this takes; the launch files state the limit, and
    # their memory fraction, which SGLang then keeps, counts the decode batch's activations, not the limit's)
    tokens = np.where(role == ROLE_DECODE, np.maximum(graph_bs, 2048.0), np.maximum(chunk, 2048.0))
    mib = 512.0 + tokens * 1.5 + tp_size * pp / 8.0 * 1024.0
    # (SGLang adds 1.5 MiB more past 300 sequences, but DeepSeek-R1 ran at DP72 on GB200 with 512-sequence graphs,
    # where that rule leaves its weights no room: the measured runs bound what is reserved, not the heuristic)
    per_dp_rank = graph_bs * dp * 3.0
    mib = mib + np.where(decodes, graph_bs * 2.0 + np.where(attn_dp, per_dp_rank, 0.0), 0.0)
    # prefill graphs on every server that prefills (SGLang's default prefill backend, breakable; off with pp > 1,
    # where it is opt-in): 8 MiB per captured token count up to the server's whole chunk, or 1.5 GiB for MLA; a
    # further 1 GiB with DeepEP (its bridge pool).  The memory hook runs before handle_data_parallelism divides the
    # chunk by the attention-DP width (arg_groups/pipeline.py; parallel_hook.py re-clamps the graphs afterwards, too
    # late for the reserve), so the count is the whole chunk's, except with DeepEP, whose counts were fixed earlier
    deepep = attn_dp & (np.asarray(ep) > 1) & (np.asarray(ep) == tp * dp)  # the launch files' DeepEP rule
    prefills = (role != ROLE_DECODE) & (np.asarray(pp) <= 1)
    graph_count = np.where(deepep, _sglang_deepep_prefill_graph_count(), sglang_prefill_graph_count(chunk))
    prefill_graphs = np.where(np.asarray(mla, dtype=bool), 1.5 * 1024.0, graph_count * 8.0)
    mib = mib + np.where(prefills, prefill_graphs + np.where(deepep, 1024.0, 0.0), 0.0)
    mib = np.where(memory_bytes > 60 * GIB, np.maximum(mib, 10 * 1024.0), mib)
    mib = mib + np.where(deepep & decodes, 2.0 * 1024.0, 0.0)
    return mib * MIB


@dataclass(frozen=True)
class MemoryBudget:
    """Memory per GPU of one engine rank under the engine's own rule (bytes, arrays)."""

    weights: np.ndarray
    activations: np.ndarray
    cuda_graphs: np.ndarray
    runtime: np.ndarray
    kv_pool: np.ndarray  # what the engine gives the KV cache
    budget: np.ndarray  # what the engine's knob lets it use in total
    knob: np.ndarray  # the value of the engine's memory flag (fraction)


def check_memory_fraction(value) -> float:
    """A value a user sets on an engine's memory flag: a real number, 0 < f <= 1, with at most three decimals
    (what the launch files write and the estimate shows, so the value checked is the value launched)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"must be a number between 0 and 1 (e.g. 0.9), but got {value!r}")
    f = float(value)
    if not (math.isfinite(f) and 0.0 < f <= 1.0):
        raise ValueError(f"0 < fraction <= 1 must hold (the share of GPU memory the engine's memory flag gives "
                         f"it), but got {value!r}")
    # within 5e-8 of a three-decimal value: a float32 0.9 is 0.9; 0.9999999 is not 1
    if abs(f * 1000.0 - round(f * 1000.0)) > 5e-5 or round(f, 3) <= 0.0:
        raise ValueError(f"must have at most three decimals, as the engines' flags are written (e.g. "
                         f"{max(round(f, 3), 0.001):g}), but got {value!r}")
    return round(f, 3)


def memory_budget(engine: str, a, q, g, tp, pp, dp, ep, max_batch, chunk, *, fraction=None,
                  role=ROLE_AGG) -> MemoryBudget:
    """The KV pool an engine allots on each GPU, with the parts of its budget.

    ``fraction`` overrides the knob (vLLM gpu-memory-utilization, SGLang mem-fraction-static,
    TensorRT-LLM free_gpu_memory_fraction); default: the engine's default (SGLang: its computed one, for the
    engines of ``role``: ROLE_AGG, ROLE_PREFILL or ROLE_DECODE, per row).
    """
    fam = engine_family(engine)
    M = g["mem"]
    w = weight_bytes_per_gpu(a, q, tp, pp, dp, ep)
    act = activation_bytes(a, chunk, tp, dp, ep, max_batch)
    graphs = cuda_graph_bytes(a, max_batch, tp, dp, ep)
    rt = runtime_bytes(tp, pp, dp, ep)
    if fam == "sglang":
        if fraction is None:
            reserved = np.maximum(sglang_reserved_bytes(chunk, tp, pp, dp, max_batch, M, moe=a["E"] > 0, ep=ep,
                                                        mla=a["mla"] > 0, role=role), act + graphs + rt)
            fraction = np.floor((M - reserved) / M * 1000.0) / 1000.0
        knob = np.asarray(fraction, dtype=np.float64) + 0.0 * M
        pool = knob * M - w
        budget = M
    elif fam == "trtllm":
        knob = np.asarray(DEFAULTS["trtllm"].memory_fraction if fraction is None else fraction, dtype=np.float64) + 0.0 * M
        pool = knob * (M - w - act - rt - graphs)
        budget = M
    else:
        knob = np.asarray(DEFAULTS["vllm"].memory_fraction if fraction is None else fraction, dtype=np.float64) + 0.0 * M
        budget = knob * M
        pool = budget - w - rt - act - graphs
    return MemoryBudget(weights=w, activations=act, cuda_graphs=graphs, runtime=rt, kv_pool=np.maximum(pool, 0.0),
                        budget=budget, knob=knob)
