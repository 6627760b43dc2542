"""What the serving model needs to know of a model and a GPU, as numbers (scalars or arrays).

``model_arrays(specs)`` turns model specs into the quantities the serving cost model reads
(parameters by class, KV-cache elements, attention FLOPs per key, recurrent state), one entry per
spec, so that one call of the cost model can evaluate rows of many models at once (validation and
calibration) or many plans of one model (search).  ``gpu_arrays(hardware)`` does the same for GPUs,
``precision_arrays`` for the weight format of each class of weights.

Parameter classes (all layers): ``P_attn`` attention blocks (GQA, MLA with DSA's indexer, Gated
DeltaNet), ``P_dense`` dense MLP layers, ``P_shared`` shared experts and routers of the MoE layers,
``P_expert`` one routed expert, ``P_embed`` / ``P_head`` embedding and (untied) output layer.
KV cache per token per attention layer (``kv_elems``): GQA ``2 * kv_heads * head_dim`` split over
the TP ranks (``kv_split`` 1); MLA the latent plus the RoPE key (``kv_lora_rank + qk_rope_head_dim``),
replicated on every TP rank (``kv_split`` 0: each rank needs the whole latent for its heads, which is
why MLA models serve with attention data parallelism).  DSA's indexer keeps an fp8 key per token
(``idx_elems``) and scores every earlier key; sliding layers hold at most ``window`` tokens; linear
(Gated DeltaNet) layers hold a fixed state per sequence (``lin_state_bytes``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..inputs.hardware import Cluster, Hardware
from ..inputs.modelspec import ModelSpec

ARCH_FIELDS = ("L", "h", "V", "n_heads", "n_kv_heads", "head_dim", "n_full", "n_swa", "n_lin", "window", "mla",
               "kv_elems", "kv_split", "idx_elems", "dec_attn_flops", "pf_attn_flops", "dsa_topk", "idx_flops",
               "lin_state_bytes", "lin_flops", "E", "topk", "n_moe", "P_attn", "P_dense", "P_shared", "P_expert",
               "P_embed", "P_head", "P_norm", "ffn", "moe_ffn", "max_len")

# Bytes per weight of each storage format (scales included): fp8 with 128x128 block scales (fp32),
# int4 with one bf16 scale per group of 128 (AWQ/GPTQ) or 32 (compressed-tensors, Kimi-K2.5),
# NVFP4 (E2M1 + one fp8 scale per 16), MXFP4 (E2M1 + one E8M0 scale per 32).
WEIGHT_BYTES: Mapping[str, float] = {
    "bf16": 2.0,
    "fp8": 1.0 + 4.0 / (128 * 128),
    "int8": 1.0,
    "int4": 0.5 + 2.0 / 128,
    "int4_g32": 0.5 + 2.0 / 32,
    "fp4": 0.5 + 1.0 / 16,
    "mxfp4": 0.5 + 1.0 / 32,
}
KV_BYTES: Mapping[str, float] = {"bf16": 2.0, "fp8": 1.0}
# Generation of each GPU (fixed per-step costs differ between them; see ServingParams.older_overhead).
BLACKWELL_PREFIXES = ("b200", "b300", "gb200", "gb300", "rtx-pro-6000")

_CACHE: dict[int, dict[str, float]] = {}


def model_scalars(m: ModelSpec) -> dict[str, float]:
    """The serving quantities of one model spec (see the module docstring)."""
    key = id(m)
    cached = _CACHE.get(key)
    if cached is not None and cached.get("_spec") is m:
        return cached
    L, h = m.n_layers, m.hidden_size
    n_full, n_swa, n_lin = (m.n_layers_of_kind(k) for k in ("full", "sliding", "linear"))
    mla = m.mla is not None
    if mla:
        kv_elems = float(m.mla.kv_cache_elements_per_token)
        dec = m.mla.core_flops_per_key(m.n_heads, absorbed=True)
        pf = m.mla.core_flops_per_key(m.n_heads, absorbed=False)
    else:
        kv_elems = float(2 * m.kv_width)
        dec = pf = 4.0 * m.q_width
    dsa = m.dsa
    lin = m.linear_attention
    moe = m.moe
    out = {
        "L": float(L), "h": float(h), "V": float(m.vocab_size), "n_heads": float(m.n_heads),
        "n_kv_heads": float(m.n_kv_heads), "head_dim": float(m.head_dim),
        "n_full": float(n_full), "n_swa": float(n_swa), "n_lin": float(n_lin),
        "window": float(m.sliding_window or 0), "mla": float(mla), "kv_elems": kv_elems,
        "kv_split": 0.0 if mla else 1.0,
        "idx_elems": float(dsa.kv_cache_elements_per_token) if dsa else 0.0,
        "dec_attn_flops": float(dec), "pf_attn_flops": float(pf),
        "dsa_topk": float(dsa.index_topk) if dsa else 0.0,
        "idx_flops": float(dsa.core_flops_per_key) if dsa else 0.0,
        "lin_state_bytes": float(lin.state_bytes_per_sequence(2.0)) if lin else 0.0,
        "lin_flops": float(lin.core_flops_per_token) if lin else 0.0,
        "E": float(moe.n_experts) if moe else 0.0, "topk": float(moe.top_k) if moe else 0.0,
        "n_moe": float(m.n_moe_layers),
        "P_attn": float(m.attention_params_total),
        "P_dense": float(m.n_dense_layers * m.dense_mlp_params_per_layer),
        "P_shared": float(m.n_moe_layers * m.shared_params_per_moe_layer),
        "P_expert": float(m.mlp_matrices * h * moe.expert_ffn_hidden_size) if moe else 0.0,
        "P_embed": float(m.embedding_params), "P_head": float(m.output_params),
        "P_norm": float(L * m.norm_params_per_layer + h),
        "ffn": float(m.ffn_hidden_size), "moe_ffn": float(moe.expert_ffn_hidden_size) if moe else 0.0,
        "max_len": float(m.max_seq_len or 0),
    }
    out["_spec"] = m  # type: ignore[assignment]
    _CACHE[key] = out
    return out


def model_arrays(specs: Sequence[ModelSpec]) -> dict[str, np.ndarray]:
    """``model_scalars`` of every spec, as arrays (one entry per spec)."""
    rows = [model_scalars(s) for s in specs]
    return {k: np.array([r[k] for r in rows], dtype=np.float64) for k in ARCH_FIELDS}


# A GPU's measured GEMM ceiling (``reference_efficiency.gemm``, MAMF: the best a bf16 matmul reaches of the datasheet
# peak; A100 0.87, H100 and H200 0.80, B200 0.78, GB200 0.73, MI300X 0.51 in the bundled profiles, from
# stas00/ml-engineering's MAMF table) scales every GPU's GEMM rates; DEFAULT_GEMM_CEILING is used where a profile
# gives none.  FP8 and FP4 GEMMs take the same fraction of their own peaks: PyTorch's FP8
# matmul reaches less of its peak (0.64-0.68 on an H200, benchmarks/gpu_kernels.py; MAMF 0.71-0.73), but the engines
# run their own FP8 kernels, and a per-precision ceiling from it made the fits worse (docs/serving.md).
DEFAULT_GEMM_CEILING = 0.80

GPU_FIELDS = ("bf16", "fp8", "int8", "fp4", "gemm_ceiling", "hbm", "mem", "nvlink", "nvlink_lat", "scale_up",
              "domain", "node", "net", "net_lat", "blackwell")


def gpu_scalars(hw: Hardware) -> dict[str, float]:
    """A GPU's datasheet numbers as the serving model reads them, and its measured GEMM ceiling (the share of a
    peak that prefill GEMMs reach is fitted as a share of this ceiling: ``ServingParams.gemm``)."""
    peaks = hw.peak_tflops
    domain = hw.gpus_per_scale_up_domain
    return {
        "bf16": peaks["bf16"] * 1e12, "fp8": peaks.get("fp8", 0.0) * 1e12, "int8": peaks.get("int8", 0.0) * 1e12,
        "fp4": peaks.get("fp4", 0.0) * 1e12, "gemm_ceiling": hw.reference_efficiency.get("gemm", DEFAULT_GEMM_CEILING),
        "hbm": hw.memory_bandwidth_gb_per_s * 1e9,
        "mem": hw.memory_gib * 2**30, "nvlink": hw.intra_node.bandwidth_gb_per_s * 1e9,
        "nvlink_lat": hw.intra_node.latency_us * 1e-6, "scale_up": hw.scale_up_link.bandwidth_gb_per_s * 1e9,
        "domain": float(domain), "node": float(hw.gpus_per_node), "net": hw.inter_node.bandwidth_gb_per_s * 1e9,
        "net_lat": hw.inter_node.latency_us * 1e-6,
        "blackwell": float(hw.name.startswith(BLACKWELL_PREFIXES) or "fp4" in peaks),
    }


def cluster_scalars(cluster: Cluster) -> dict[str, float]:
    """:func:`gpu_scalars` with the cluster's own node and NVLink domain (``--gpus-per-node`` 4 of an 8-GPU profile:
    tensor parallelism over 8 GPUs crosses the network, which the profile's node size would price as NVLink)."""
    return {**gpu_scalars(cluster.hardware), "domain": float(cluster.gpus_per_scale_up_domain),
            "node": float(cluster.gpus_per_node)}


def gpu_arrays(hws: Sequence[Hardware]) -> dict[str, np.ndarray]:
    rows = [gpu_scalars(h) for h in hws]
    return {k: np.array([r[k] for r in rows], dtype=np.float64) for k in GPU_FIELDS}


# --- weight formats per class --------------------------------------------------------------------

def class_formats(is_moe: bool, weights: str, expert_weights: str | None = None) -> tuple[str, str, str]:
    """Storage format of (attention, dense MLP and shared experts, routed experts).

    A dense model runs every linear layer in ``weights``.  A MoE model's routed experts carry
    ``expert_weights`` (default: ``weights``); 4-bit expert checkpoints (NVFP4, MXFP4, INT4) keep
    attention in bf16 (NVIDIA's NVFP4 DeepSeek exports exclude the MLA projections, gpt-oss keeps
    attention bf16, Kimi-K2.5's INT4 covers routed experts only); the dense MLP and shared experts
    follow NVFP4, and stay bf16 for MXFP4 and INT4.
    """
    if not is_moe:
        return weights, weights, weights
    expert = expert_weights or weights
    four_bit = ("fp4", "mxfp4", "int4", "int4_g32")
    attn = "bf16" if expert in four_bit or weights in four_bit else weights
    mlp = expert if expert == "fp4" else ("bf16" if expert in four_bit else weights)
    return attn, mlp, expert


def _peak_and_native(fmt: str, g: Mapping[str, float]) -> tuple[float, float]:
    """(GEMM ceiling FLOP/s: the peak times the measured ceiling; 1 if the format runs on its own tensor cores
    else 0 = weight-only dequantising)."""
    peak, native = _peak(fmt, g)
    return peak * g["gemm_ceiling"], native


def _peak(fmt: str, g: Mapping[str, float]) -> tuple[float, float]:
    if fmt in ("fp4", "mxfp4"):
        return (g["fp4"], 1.0) if g["fp4"] > 0 else (g["bf16"], 0.0)
    if fmt == "fp8":
        return (g["fp8"], 1.0) if g["fp8"] > 0 else (g["bf16"], 0.0)
    if fmt == "int8":
        return (g["int8"], 1.0) if g["int8"] > 0 else (g["bf16"], 0.0)
    if fmt in ("int4", "int4_g32"):
        return g["bf16"], 0.0
    return g["bf16"], 1.0


def precision_arrays(formats: Sequence[tuple[str, str, str]], gpus: Sequence[Mapping[str, float]],
                     kv: Sequence[str]) -> dict[str, np.ndarray]:
    """Per row: bytes per weight (``b_*``), GEMM ceiling (``pk_*``: the peak times the measured ceiling), whether
    the format is 4-bit on native FP4 tensor cores (``fp4_*``) or weight-only (``wo_*``) for classes attn / mlp /
    exp, and KV bytes (``kv_b``)."""
    names = [f"{p}_{c}" for c in ("attn", "mlp", "exp") for p in ("b", "pk", "fp4", "wo")]
    # a search's 10^5 plans hold a handful of (formats, GPU) pairs: each is worked out once, then indexed
    code_of: dict[tuple, int] = {}
    table: list[list[float]] = []
    codes = np.empty(len(formats), dtype=np.int64)
    for i, (fmts, g) in enumerate(zip(formats, gpus)):
        key = (fmts, id(g))  # the GPU mappings are alive (in ``gpus``) for the whole loop
        code = code_of.get(key)
        if code is None:
            code = code_of[key] = len(table)
            values = []
            for fmt in fmts:
                peak, native = _peak_and_native(fmt, g)
                values += [WEIGHT_BYTES[fmt], peak, float(fmt in ("fp4", "mxfp4") and native > 0),
                           float(native == 0 and WEIGHT_BYTES[fmt] < 0.9)]
            table.append(values)
        codes[i] = code
    columns = np.array(table, dtype=np.float64).reshape(len(table), len(names))
    out = {name: columns[codes, j] for j, name in enumerate(names)}
    kv_bytes = {k: KV_BYTES[k] for k in set(kv)}
    out["kv_b"] = np.array([kv_bytes[k] for k in kv], dtype=np.float64)
    return out
