"""Model specs (the *application* architecture): bundled YAML, a YAML path, an HF config.json, or an HF id.

A :class:`ModelSpec` is plain, frozen, validated data plus the arithmetic that follows from the
shapes alone: parameter counts, attention FLOPs per token, KV-cache bytes and the activations an
attention block keeps for backward.  Those helpers are the one place both the training and the
serving model read architecture-dependent sizes from, so a new attention kind (latent, sliding,
sparse, linear) is described here once.

Attention kinds (per layer, ``layer_types``):

* ``full``: causal softmax attention over the whole context: grouped-query attention (GQA), or
  multi-head latent attention when ``mla`` is set (DeepSeek-V2 arXiv 2405.04434 §2.1, DeepSeek-V3
  arXiv 2412.19437 §2.1.1), optionally with DeepSeek sparse attention (``dsa``: a lightning indexer
  keeps ``index_topk`` keys per query; DeepSeek-V3.2, GLM-5);
* ``sliding``: the same attention limited to the last ``sliding_window`` tokens (gpt-oss: 128 on
  alternate layers), so its FLOPs and cache stop growing with the context;
* ``linear``: Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5; ``linear_attention``): a fixed
  recurrent state per sequence instead of a cache.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import InputError, check_keys
from . import loading
from .hf_config import ATTENTION_BIASES, ROPE_SCALINGS, ROUTER_SCORES
from .loading import MAX_LAYERS, MAX_SIZE
from .resources import bundled_dir, bundled_names, read_named, require_name

MLP_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
POSITION_KINDS = ("rope", "learned", "alibi", "none")

LAYER_KINDS = ("full", "sliding", "linear")
# Bytes of the attention kernel's fp32 log-sum-exp, per head (FlashAttention saves it for backward).
_LSE_BYTES_PER_HEAD = 4.0


def mean_keys_per_query(seq_len: float, window: int | None = None, causal: bool = True) -> float:
    """Keys one query of a sequence of ``seq_len`` tokens attends to, averaged over its positions.

    Full causal attention: ``s/2``, the convention of Megatron-LM's and NeMo's FLOP formulas
    (half of the square; flash kernels skip the masked blocks).  A window (or a top-k selection)
    of ``W`` keys: the exact mean of ``min(t, W)`` over ``t = 1..s``, ``W - W(W-1)/(2s)`` for
    ``s > W`` (Megatron-LM ``num_floating_point_operations``, sliding-window term), and as full
    attention for ``s <= W``.  ``causal=False`` counts the whole square (``s``, or ``min(s, W)``).
    """
    if not causal:
        return float(seq_len if window is None else min(seq_len, window))
    if window is None or seq_len <= window:
        return seq_len / 2.0
    return window - window * (window - 1) / (2.0 * seq_len)


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts shape. Layers ``first_dense_layers, +layer_interval, ...`` are MoE."""

    n_experts: int
    top_k: int
    expert_ffn_hidden_size: int
    n_shared_experts: int = 0
    shared_expert_ffn_hidden_size: int = 0  # total width of the shared expert(s)
    layer_interval: int = 1
    first_dense_layers: int = 0
    # Group-limited routing (DeepSeek-V3 §2.1.2, HF n_group / topk_group; Megatron --moe-router-num-groups /
    # --moe-router-group-topk): the experts form ``routing_groups`` equal groups and a token's top-k experts
    # come from its best ``routing_group_topk`` groups.  1 / 1: no limit.  With the experts of a group on
    # one node ("node-limited routing", M = 4 nodes for DeepSeek-V3) it bounds the nodes a token is sent to.
    routing_groups: int = 1
    routing_group_topk: int = 1
    # The router as the model was trained (HF scoring_func, topk_method noaux_tc, routed_scaling_factor):
    # DeepSeek-V3 scores experts with a sigmoid, balances them with a per-expert bias instead of a large auxiliary
    # loss (§2.1.2) and scales the top-k weights by 2.5.  The launch files need them; no estimate reads them.
    router_score: str = "softmax"  # ROUTER_SCORES
    router_expert_bias: bool = False
    router_topk_scaling: float | None = None
    # the load-balancing loss's weight a config.json states (HF router_aux_loss_coef: Mixtral 0.02, Qwen3 0.001), in
    # Hugging Face's convention; the Megatron files keep their own weight and say this one (model_notes)
    router_aux_loss_coeff: float | None = None

    def __post_init__(self) -> None:
        if self.router_score not in ROUTER_SCORES:
            raise ValueError(f"router_score must be one of {', '.join(ROUTER_SCORES)}, but got "
                             f"(router_score={self.router_score!r})")
        if self.router_expert_bias and self.router_score != "sigmoid":
            # the bias is added to sigmoid affinities (DeepSeek-V3 §2.1.2); Megatron-Core refuses it on softmax scores
            raise ValueError("router_expert_bias needs router_score sigmoid (bias balancing adds to sigmoid "
                             f"affinities), but got (router_expert_bias=True, router_score={self.router_score!r}); "
                             "set router_score: sigmoid or drop router_expert_bias")
        if not 1 <= self.routing_group_topk <= self.routing_groups or self.n_experts % self.routing_groups:
            raise ValueError("routing_groups must divide n_experts and 1 <= routing_group_topk <= routing_groups, but got "
                             f"(routing_groups={self.routing_groups}, routing_group_topk={self.routing_group_topk}, "
                             f"n_experts={self.n_experts})")
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k must hold 1 <= top_k <= n_experts, but got (top_k={self.top_k}, n_experts={self.n_experts})")
        if (self.n_shared_experts == 0) != (self.shared_expert_ffn_hidden_size == 0):
            raise ValueError(
                "n_shared_experts and shared_expert_ffn_hidden_size must be both zero or both positive, but got "
                f"(n_shared_experts={self.n_shared_experts}, shared_expert_ffn_hidden_size={self.shared_expert_ffn_hidden_size})"
            )

    def n_moe_layers(self, n_layers: int) -> int:
        if self.first_dense_layers >= n_layers:
            return 0
        return len(range(self.first_dense_layers, n_layers, self.layer_interval))


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2 arXiv 2405.04434 §2.1; DeepSeek-V3 arXiv 2412.19437 §2.1.1).

    Keys and values are compressed jointly into a latent of ``kv_lora_rank`` (down-projection, then
    RMSNorm); per-head keys (``qk_nope_head_dim``) and values (``v_head_dim``) are up-projected from
    it.  A RoPE key of ``qk_rope_head_dim`` comes straight from the hidden state and is shared by all
    heads.  Queries go through a latent of ``q_lora_rank`` (absent in DeepSeek-V2-Lite and Moonlight,
    ``None``: one h -> heads projection).  Only the latent and the RoPE key are cached.
    Module names below are those of the Hugging Face ``DeepseekV3Attention``.
    """

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"mla.{name} must be >= 1, but got ({name}={getattr(self, name)})")
        if self.q_lora_rank is not None and self.q_lora_rank < 1:
            raise ValueError(f"mla.q_lora_rank must be >= 1 or absent, but got (q_lora_rank={self.q_lora_rank})")

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's query and key: the non-rotary part plus the RoPE part."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def weight_params(self, hidden_size: int, n_heads: int) -> Mapping[str, int]:
        """Parameters of one attention block by module (weights and the two latent RMSNorms)."""
        h, a = hidden_size, n_heads
        parts: dict[str, int] = {}
        if self.q_lora_rank:
            parts["q_a_proj"] = h * self.q_lora_rank
            parts["q_a_layernorm"] = self.q_lora_rank
            parts["q_b_proj"] = self.q_lora_rank * a * self.qk_head_dim
        else:
            parts["q_proj"] = h * a * self.qk_head_dim
        parts["kv_a_proj_with_mqa"] = h * (self.kv_lora_rank + self.qk_rope_head_dim)
        parts["kv_a_layernorm"] = self.kv_lora_rank
        parts["kv_b_proj"] = self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim)
        parts["o_proj"] = a * self.v_head_dim * h
        return MappingProxyType(parts)

    def params(self, hidden_size: int, n_heads: int) -> int:
        return sum(self.weight_params(hidden_size, n_heads).values())

    def projection_flops_per_token(self, hidden_size: int, n_heads: int) -> float:
        """Forward FLOPs of the block's weight GEMMs for one token (2 per multiply-add).

        The same in both forms: absorbing W_UK into the query and W_UV into the output (decode)
        replaces ``kv_b_proj`` on the new token by two per-head products of the same size,
        ``2*a*d_nope*r_kv + 2*a*r_kv*d_v``.
        """
        weights = self.weight_params(hidden_size, n_heads)
        return 2.0 * sum(v for k, v in weights.items() if not k.endswith("layernorm"))

    def up_projection_flops_per_token(self, n_heads: int) -> float:
        """Forward FLOPs of ``q_b_proj`` and ``kv_b_proj`` for one token: what recomputing the MLA
        up-projections in backward repeats (DeepSeek-V3 §3.2.3; Megatron ``mla_up_proj``)."""
        q = self.q_lora_rank * n_heads * self.qk_head_dim if self.q_lora_rank else 0
        return 2.0 * (q + self.kv_lora_rank * n_heads * (self.qk_nope_head_dim + self.v_head_dim))

    def core_flops_per_key(self, n_heads: int, absorbed: bool = False) -> float:
        """Forward FLOPs of scores and weighted values for one query against one key.

        Non-absorbed (training, prefill; keys and values expanded per head):
        ``2*a*(d_nope + d_rope) + 2*a*d_v``.  Absorbed (decode, against the cached latent, as
        FlashMLA with d_k = 576, d_v = 512): ``2*a*(r_kv + d_rope) + 2*a*r_kv``.
        """
        a = n_heads
        if absorbed:
            return 2.0 * a * (self.kv_lora_rank + self.qk_rope_head_dim) + 2.0 * a * self.kv_lora_rank
        return 2.0 * a * self.qk_head_dim + 2.0 * a * self.v_head_dim

    @property
    def kv_cache_elements_per_token(self) -> int:
        """Cached values per token per layer: the KV latent and the shared RoPE key (V2 §2.1.3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def activation_bytes_per_token(self, hidden_size: int, n_heads: int,
                                   recompute_up_proj: bool = False) -> Mapping[str, float]:
        """Bytes one attention block keeps for backward per token at 16 bits (no TP/SP/CP split).

        A flash-style core saves Q, K, V, its output and an fp32 log-sum-exp per head.  With
        ``recompute_up_proj`` the norms and the up-projections are recomputed in backward, as
        DeepSeek-V3 does (arXiv 2412.19437 §3.2.3; Megatron ``--recompute-modules layernorm
        mla_up_proj``): only the block input, the latents before their norms, the RoPE key, the
        core output and the log-sum-exp stay.  Our derivation; not checked against a measured run.
        """
        h, a = hidden_size, n_heads
        q_latent = self.q_lora_rank or 0
        parts: dict[str, float] = {"block_input": h}
        if not recompute_up_proj:
            parts["normed_input"] = h
        if q_latent:
            parts["q_latent"] = q_latent
            if not recompute_up_proj:
                parts["q_latent_normed"] = q_latent
        parts["kv_latent"] = self.kv_lora_rank
        if not recompute_up_proj:
            parts["kv_latent_normed"] = self.kv_lora_rank
        parts["k_rope"] = self.qk_rope_head_dim
        if not recompute_up_proj:
            parts["query"] = a * self.qk_head_dim
            parts["key"] = a * self.qk_head_dim
            parts["value"] = a * self.v_head_dim
        parts["core_output"] = a * self.v_head_dim
        out = {name: 2.0 * elements for name, elements in parts.items()}
        out["softmax_lse"] = _LSE_BYTES_PER_HEAD * a
        return MappingProxyType(out)


@dataclass(frozen=True)
class DSASpec:
    """DeepSeek sparse attention: a lightning indexer keeps ``index_topk`` keys per query.

    Shapes of ``DeepseekV32Indexer`` / ``GlmMoeDsaIndexer`` (huggingface/transformers,
    models/glm_moe_dsa): ``wq_b`` q-latent -> heads x dim, ``wk`` h -> dim, a LayerNorm over dim
    (weight and bias) and ``weights_proj`` h -> heads.  Its scores are ReLU(q.k) weighted per head
    and summed over heads, over **all** earlier keys; the attention core then sees only the top-k.
    Every layer runs its own indexer (the configs here set no shared indexers).
    """

    index_n_heads: int
    index_head_dim: int
    index_topk: int

    def __post_init__(self) -> None:
        for name in ("index_n_heads", "index_head_dim", "index_topk"):
            if getattr(self, name) < 1:
                raise ValueError(f"dsa.{name} must be >= 1, but got ({name}={getattr(self, name)})")

    def weight_params(self, hidden_size: int, q_lora_rank: int) -> Mapping[str, int]:
        h, heads, dim = hidden_size, self.index_n_heads, self.index_head_dim
        return MappingProxyType({
            "indexer.wq_b": q_lora_rank * heads * dim,
            "indexer.wk": h * dim,
            "indexer.k_norm": 2 * dim,
            "indexer.weights_proj": h * heads,
        })

    def projection_flops_per_token(self, hidden_size: int, q_lora_rank: int) -> float:
        weights = self.weight_params(hidden_size, q_lora_rank)
        return 2.0 * sum(v for k, v in weights.items() if not k.endswith("k_norm"))

    @property
    def core_flops_per_key(self) -> float:
        """Indexer scores per query and earlier key: ``2*heads*dim`` (q.k) + ``2*heads`` (weighted sum)."""
        return 2.0 * self.index_n_heads * (self.index_head_dim + 1)

    @property
    def kv_cache_elements_per_token(self) -> int:
        """The indexer's own key cache, per token per layer."""
        return self.index_head_dim


@dataclass(frozen=True)
class LinearAttentionSpec:
    """Gated DeltaNet linear attention (Yang et al. 2024, arXiv 2412.06464), as in Qwen3-Next and Qwen3.5.

    Shapes of ``Qwen3_5MoeGatedDeltaNet`` (huggingface/transformers, models/qwen3_5_moe):
    ``in_proj_qkv`` h -> 2*keys + values, ``in_proj_z`` h -> values, ``in_proj_b`` and ``in_proj_a``
    h -> value heads, a depthwise causal conv1d of ``conv_kernel`` over the q/k/v channels,
    ``dt_bias`` and ``A_log`` per value head, a gated RMSNorm over the value head width and
    ``out_proj`` values -> h.  Each sequence keeps a recurrent state of value heads x key width x
    value width (``recurrent_state_bytes_per_element``: 4 for the fp32 state Qwen3.5 declares,
    ``mamba_ssm_dtype``) and the conv's last ``conv_kernel - 1`` inputs, whatever its length.
    """

    n_key_heads: int
    key_head_dim: int
    n_value_heads: int
    value_head_dim: int
    conv_kernel: int
    recurrent_state_bytes_per_element: int = 4

    def __post_init__(self) -> None:
        for name in ("n_key_heads", "key_head_dim", "n_value_heads", "value_head_dim", "conv_kernel",
                     "recurrent_state_bytes_per_element"):
            if getattr(self, name) < 1:
                raise ValueError(f"linear_attention.{name} must be >= 1, but got ({name}={getattr(self, name)})")

    @property
    def key_width(self) -> int:
        return self.n_key_heads * self.key_head_dim

    @property
    def value_width(self) -> int:
        return self.n_value_heads * self.value_head_dim

    @property
    def conv_channels(self) -> int:
        return 2 * self.key_width + self.value_width

    def weight_params(self, hidden_size: int) -> Mapping[str, int]:
        h = hidden_size
        return MappingProxyType({
            "in_proj_qkv": h * self.conv_channels,
            "in_proj_z": h * self.value_width,
            "in_proj_b": h * self.n_value_heads,
            "in_proj_a": h * self.n_value_heads,
            "conv1d": self.conv_channels * self.conv_kernel,
            "dt_bias_a_log": 2 * self.n_value_heads,
            "norm": self.value_head_dim,
            "out_proj": self.value_width * h,
        })

    def projection_flops_per_token(self, hidden_size: int) -> float:
        """In and out projections (Megatron-LM ``gdn_layer_flops``: ``h*(2k + 2v + 2*heads_v) + h*v``, x2)."""
        h = hidden_size
        return 2.0 * (h * (2 * self.key_width + 2 * self.value_width + 2 * self.n_value_heads) + h * self.value_width)

    @property
    def core_flops_per_token(self) -> float:
        """Conv and delta rule per token, independent of the context (Megatron-LM ``gdn_layer_flops``:
        ``conv_kernel*(2k + v) + 4*heads_v*d_k*d_v``, x2; Megatron writes ``d_v**2``, equal here)."""
        return 2.0 * (self.conv_kernel * self.conv_channels
                      + 4.0 * self.n_value_heads * self.key_head_dim * self.value_head_dim)

    def state_bytes_per_sequence(self, bytes_per_element: float) -> float:
        """Recurrent state (at ``recurrent_state_bytes_per_element``) plus conv state (at ``bytes_per_element``)."""
        recurrent = self.n_value_heads * self.key_head_dim * self.value_head_dim * self.recurrent_state_bytes_per_element
        return recurrent + self.conv_channels * (self.conv_kernel - 1) * bytes_per_element


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer. Sizes are per layer; ``head_dim`` is explicit (Qwen3: 128 != h/a).

    Under MLA, ``head_dim`` is the query/key head width (``qk_nope + qk_rope``) and ``n_kv_heads``
    equals ``n_heads``: the per-head keys and values after up-projection, which is what training
    computes on.  ``q_width`` / ``kv_width`` keep that meaning; the cache, the parameters and the
    FLOPs come from the helpers below, which know the latent.
    """

    name: str
    n_layers: int
    hidden_size: int
    ffn_hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    mlp: str = "swiglu"
    tied_embeddings: bool = False
    max_seq_len: int | None = None
    norm: str = "rmsnorm"
    position_embedding: str = "rope"
    dropout: bool = False
    moe: MoESpec | None = None
    description: str = ""
    source: str = ""
    mla: MLASpec | None = None
    dsa: DSASpec | None = None
    linear_attention: LinearAttentionSpec | None = None
    # One kind per layer (LAYER_KINDS); empty means every layer is "full".
    layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None  # keys a "sliding" layer attends to, its own token included
    attention_output_gate: bool = False  # Qwen3.5: a sigmoid gate on the attention output; q projection 2x wide
    attention_sinks: bool = False  # gpt-oss: one learned softmax logit per head (no FLOPs to speak of)
    # Multi-token-prediction modules (DeepSeek-V3 §2.2): each is a projection of [norm(h); norm(emb)]
    # (2h -> h), one transformer block like the last layer, and the shared embedding and output head.
    mtp_layers: int = 0
    # What the launch files need to build the same network and no estimate reads (HF rope_theta, rope_scaling's
    # rope_type, Qwen3's q_norm / k_norm): Megatron-LM's defaults (rotary base 10000, no scaling, no QK norm)
    # would train another model.  None / False: not stated.
    rope_theta: float | None = None
    rope_scaling: str | None = None  # ROPE_SCALINGS
    qk_layernorm: bool = False
    # Biases on the attention projections (HF Qwen2's q/k/v; attention_bias: true puts them on q, k, v and o):
    # "none", "qkv" or "all".  Megatron's default (--disable-bias-linear) drops them.
    attention_bias: str = "none"
    # QK normalisation over all heads of a layer together (MiniMax-M2's qk_norm_type per_layer), which Megatron's
    # per-head --qk-layernorm is not; and the share of each head that RoPE rotates (Megatron's --rotary-percent;
    # None: all of it).
    qk_norm_per_layer: bool = False
    rotary_percent: float | None = None

    def __post_init__(self) -> None:
        for name in ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "head_dim", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{name} must be a whole number, but got ({name}={value!r})")
            if value < 1:
                raise ValueError(f"{name} must be >= 1, but got ({name}={value})")
            limit = MAX_LAYERS if name == "n_layers" else MAX_SIZE
            if value > limit:
                raise ValueError(f"{name} must be <= {limit:,}, but got ({name}={value})")
        if self.moe is not None and self.moe.n_experts > MAX_SIZE:
            raise ValueError(f"moe.n_experts must be <= {MAX_SIZE:,}, but got (n_experts={self.moe.n_experts})")
        if self.moe is not None and self.moe.first_dense_layers >= self.n_layers:
            raise ValueError("moe.first_dense_layers must be < n_layers (some layer must hold the experts; a model "
                             "without any is dense: drop the moe section), but got "
                             f"(first_dense_layers={self.moe.first_dense_layers}, n_layers={self.n_layers})")
        if self.moe is not None and self.moe.layer_interval > self.n_layers - self.moe.first_dense_layers:
            # an interval past the last layer leaves one MoE layer: Mixtral with 100 had shrunk to 8.5B parameters
            raise ValueError("moe.layer_interval must be <= n_layers - first_dense_layers (the layers it steps over), "
                             f"but got (layer_interval={self.moe.layer_interval}, n_layers={self.n_layers}, "
                             f"first_dense_layers={self.moe.first_dense_layers})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads must be a multiple of n_kv_heads, but got (n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads})")
        if self.mlp not in MLP_KINDS:
            raise ValueError(f"mlp must be one of {MLP_KINDS}, but got (mlp={self.mlp!r})")
        if self.mtp_layers < 0:
            raise ValueError(f"mtp_layers must be >= 0, but got (mtp_layers={self.mtp_layers})")
        if self.mtp_layers > self.n_layers:  # each MTP module is one more transformer block (DeepSeek-V3: 1 of 61)
            raise ValueError(f"mtp_layers <= n_layers must hold (the multi-token-prediction modules, each one block, "
                             f"beside the model's own layers), but got (mtp_layers={self.mtp_layers}, "
                             f"n_layers={self.n_layers}); check the value")
        if self.mla is not None:
            if self.n_kv_heads != self.n_heads or self.head_dim != self.mla.qk_head_dim:
                raise ValueError(
                    "with mla, n_kv_heads must equal n_heads and head_dim must equal qk_nope_head_dim + qk_rope_head_dim, "
                    f"but got (n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, head_dim={self.head_dim}, "
                    f"qk_head_dim={self.mla.qk_head_dim})"
                )
            if self.attention_output_gate:
                raise ValueError("attention_output_gate must be false with mla (no such model), but got (attention_output_gate=True)")
        if self.dsa is not None and (self.mla is None or not self.mla.q_lora_rank):
            raise ValueError("dsa must come with mla and an mla.q_lora_rank (the indexer reads the query latent), "
                             f"but got (mla={self.mla})")
        if self.layer_types:
            if len(self.layer_types) != self.n_layers:
                raise ValueError(f"layer_types must give one kind per layer, but got "
                                 f"(len(layer_types)={len(self.layer_types)}, n_layers={self.n_layers})")
            unknown = sorted(set(self.layer_types) - set(LAYER_KINDS))
            if unknown:
                raise ValueError(f"layer_types must hold only {LAYER_KINDS}, but got (unknown={unknown})")
        kinds = set(self.layer_kinds)
        if "sliding" in kinds and not (self.sliding_window and self.sliding_window >= 1):
            raise ValueError(f"sliding_window must be >= 1 when a layer is sliding, but got (sliding_window={self.sliding_window})")
        if self.sliding_window is not None and "sliding" not in kinds:
            raise ValueError("sliding_window must come with at least one 'sliding' entry in layer_types, "
                             f"but got (sliding_window={self.sliding_window}, layer_types={sorted(kinds)})")
        if ("linear" in kinds) != (self.linear_attention is not None):
            raise ValueError("linear_attention must be given exactly when a layer is 'linear', but got "
                             f"(linear layers={self.layer_kinds.count('linear')}, linear_attention={self.linear_attention})")
        # rope_theta, rope_scaling and rotary_percent describe rotary embeddings: with another position embedding
        # the launch files would drop them without a word, so a spec naming both has a mistake in one of them
        rotary = [f"{k}={getattr(self, k)!r}" for k in ("rope_theta", "rope_scaling", "rotary_percent")
                  if getattr(self, k) is not None]
        if rotary and self.position_embedding != "rope":
            raise ValueError(f"rope_theta, rope_scaling and rotary_percent need position_embedding rope, but got "
                             f"(position_embedding={self.position_embedding!r}, {', '.join(rotary)}); drop them or set "
                             "position_embedding: rope")

        # RoPE turns pairs of dimensions at frequencies rope_theta ** (-2i / d): a base of 1 or below turns none
        # slower than another (the published run from 10,000 to 10,000,000), and a share of the head below one
        # pair rotates nothing (1e-308 of 128 dimensions was read, and written into launch files)
        if self.rope_theta is not None and not self.rope_theta > 1:
            raise ValueError(f"rope_theta > 1 must hold (the RoPE base: 10000 in Llama 2, 500000 in Llama 3), but got "
                             f"(rope_theta={self.rope_theta!r})")
        if self.rotary_percent is not None and self.rotary_percent * self.head_dim < 2:
            raise ValueError(f"rotary_percent * head_dim >= 2 must hold (RoPE rotates pairs of dimensions, at least "
                             f"one), but got (rotary_percent={self.rotary_percent!r}, head_dim={self.head_dim})")

    # --- derived sizes -------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def q_width(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in one MLP: 2 for GeLU (up, down), 3 for SwiGLU (gate, up, down)."""
        return 3 if self.mlp == "swiglu" else 2

    @property
    def n_moe_layers(self) -> int:
        return self.moe.n_moe_layers(self.n_layers) if self.moe else 0

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """The attention kind of every layer (``layer_types``, or all ``full``)."""
        return self.layer_types or ("full",) * self.n_layers

    def n_layers_of_kind(self, kind: str) -> int:
        if kind not in LAYER_KINDS:
            raise ValueError(f"kind must be one of {LAYER_KINDS}, but got (kind={kind!r})")
        return self.layer_kinds.count(kind)

    # --- attention: parameters ---------------------------------------------------------
    def attention_params_of_kind(self, kind: str = "full") -> int:
        """Parameters of one layer's attention block of ``kind`` (norm weights of MLA latents included)."""
        h = self.hidden_size
        if kind == "linear":
            if self.linear_attention is None:
                raise ValueError("kind 'linear' needs linear_attention, but got (linear_attention=None)")
            return sum(self.linear_attention.weight_params(h).values())
        if kind not in ("full", "sliding"):
            raise ValueError(f"kind must be one of {LAYER_KINDS}, but got (kind={kind!r})")
        sinks = self.n_heads if self.attention_sinks else 0
        if self.mla is not None:
            params = self.mla.params(h, self.n_heads)
            if self.dsa is not None:
                params += sum(self.dsa.weight_params(h, self.mla.q_lora_rank).values())
            return params + sinks
        q_out = self.q_width * (2 if self.attention_output_gate else 1)
        return h * (q_out + 2 * self.kv_width) + self.q_width * h + sinks

    @property
    def attention_params_total(self) -> int:
        return sum(self.n_layers_of_kind(k) * self.attention_params_of_kind(k) for k in LAYER_KINDS
                   if self.n_layers_of_kind(k))

    @property
    def attention_params_per_layer(self) -> int:
        """Attention parameters of one layer; the mean over the layers when their kinds differ."""
        return round(self.attention_params_total / self.n_layers)

    @property
    def dense_mlp_params_per_layer(self) -> int:
        return self.mlp_matrices * self.hidden_size * self.ffn_hidden_size

    @property
    def expert_params_per_moe_layer(self) -> int:
        """Routed experts only (the part that expert parallelism shards)."""
        if not self.moe:
            return 0
        return self.moe.n_experts * self.mlp_matrices * self.hidden_size * self.moe.expert_ffn_hidden_size

    @property
    def shared_params_per_moe_layer(self) -> int:
        """Router and shared experts of one MoE layer (replicated across EP ranks)."""
        if not self.moe:
            return 0
        h = self.hidden_size
        return h * self.moe.n_experts + self.mlp_matrices * h * self.moe.shared_expert_ffn_hidden_size

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def output_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @property
    def n_params(self) -> int:
        """Parameters of the main model (MTP modules excluded, as the published totals count them)."""
        layers = self.attention_params_total + self.n_layers * self.norm_params_per_layer
        layers += self.n_dense_layers * self.dense_mlp_params_per_layer
        layers += self.n_moe_layers * (self.expert_params_per_moe_layer + self.shared_params_per_moe_layer)
        return layers + self.embedding_params + self.output_params + self.hidden_size

    @property
    def n_active_params(self) -> int:
        """Parameters one token passes through (top-k experts instead of all)."""
        if not self.moe:
            return self.n_params
        inactive = self.expert_params_per_moe_layer * (1 - self.moe.top_k / self.moe.n_experts)
        return int(self.n_params - self.n_moe_layers * inactive)

    # --- multi-token prediction -----------------------------------------------------------
    @property
    def mtp_block_is_moe(self) -> bool:
        """An MTP block copies the last layer (Megatron-LM counts it as MoE when the last layer is)."""
        return bool(self.moe) and self.n_moe_layers > 0 and (
            (self.n_layers - 1 - self.moe.first_dense_layers) % self.moe.layer_interval == 0
            and self.n_layers - 1 >= self.moe.first_dense_layers)

    @property
    def mtp_params_per_module(self) -> int:
        """One MTP module without the embedding and head it shares with the main model (DeepSeek-V3 §2.2):
        ``eh_proj`` 2h x h, three RMSNorms (``enorm``, ``hnorm``, the head's norm) and one full-attention block."""
        h = self.hidden_size
        block = self.attention_params_of_kind("full") + self.norm_params_per_layer
        if self.mtp_block_is_moe:
            block += self.expert_params_per_moe_layer + self.shared_params_per_moe_layer
        else:
            block += self.dense_mlp_params_per_layer
        return 2 * h * h + 3 * h + block

    @property
    def mtp_params(self) -> int:
        return self.mtp_layers * self.mtp_params_per_module

    @property
    def mtp_active_params(self) -> int:
        if not self.mtp_layers or not self.mtp_block_is_moe:
            return self.mtp_params
        inactive = self.expert_params_per_moe_layer * (1 - self.moe.top_k / self.moe.n_experts)
        return int(self.mtp_params - self.mtp_layers * inactive)

    # --- attention: FLOPs (forward, per token, 2 per multiply-add) -------------------------
    def attention_projection_flops_of_kind(self, kind: str = "full") -> float:
        """Forward FLOPs of one layer's attention weight GEMMs for one token."""
        h = self.hidden_size
        if kind == "linear":
            return self.linear_attention.projection_flops_per_token(h)
        if self.mla is not None:
            flops = self.mla.projection_flops_per_token(h, self.n_heads)
            if self.dsa is not None:
                flops += self.dsa.projection_flops_per_token(h, self.mla.q_lora_rank)
            return flops
        q_out = self.q_width * (2 if self.attention_output_gate else 1)
        return 2.0 * h * (q_out + 2 * self.kv_width) + 2.0 * self.q_width * h

    def attention_core_flops_of_kind(self, kind: str, context_len: float, *, causal: bool = True,
                                     decode: bool = False) -> float:
        """Forward FLOPs of one layer's attention core (scores and weighted values) for one token.

        ``decode=False``: a token of a sequence of ``context_len`` tokens, averaged over its positions
        (training, prefill; MLA in the non-absorbed form).  ``decode=True``: one new token against
        ``context_len`` cached ones (MLA absorbed).  Windows and DSA's top-k bound the keys; DSA's
        indexer still scores every earlier key; a linear layer costs the same at any context.
        """
        if kind == "linear":
            return self.linear_attention.core_flops_per_token
        window = self.sliding_window if kind == "sliding" else None
        if self.dsa is not None:
            window = self.dsa.index_topk if window is None else min(window, self.dsa.index_topk)
        if decode:
            keys = float(context_len if window is None else min(context_len, window))
            all_keys = float(context_len)
        else:
            keys = mean_keys_per_query(context_len, window, causal)
            all_keys = mean_keys_per_query(context_len, None, causal)
        if self.mla is not None:
            per_key = self.mla.core_flops_per_key(self.n_heads, absorbed=decode)
        else:
            per_key = 2.0 * self.q_width * 2  # QK^T and PV, a*d each
        flops = per_key * keys
        if self.dsa is not None:
            flops += self.dsa.core_flops_per_key * all_keys
        return flops

    def attention_projection_flops_per_token(self) -> float:
        """Forward FLOPs of every layer's attention weight GEMMs for one token."""
        return sum(self.n_layers_of_kind(k) * self.attention_projection_flops_of_kind(k) for k in LAYER_KINDS
                   if self.n_layers_of_kind(k))

    def attention_core_flops_per_token(self, context_len: float, *, causal: bool = True, decode: bool = False) -> float:
        """Forward FLOPs of every layer's attention core for one token (see ``attention_core_flops_of_kind``)."""
        return sum(self.n_layers_of_kind(k) * self.attention_core_flops_of_kind(k, context_len, causal=causal, decode=decode)
                   for k in LAYER_KINDS if self.n_layers_of_kind(k))

    def attention_flops_per_token(self, context_len: float, *, decode: bool = False, causal: bool = True) -> float:
        """Forward attention FLOPs of the whole model for one token at context length ``context_len``:
        projections plus core.  Training and prefill: ``decode=False`` (mean over a causal sequence of
        that length); one decode step: ``decode=True``."""
        return self.attention_projection_flops_per_token() + self.attention_core_flops_per_token(
            context_len, causal=causal, decode=decode)

    # --- KV cache --------------------------------------------------------------------------------
    def kv_cache_elements_per_token_of_kind(self, kind: str = "full") -> int:
        """Cached values per token for one layer of ``kind`` (0 for a linear layer: it keeps a state).

        GQA: keys and values, ``2*n_kv_heads*head_dim``.  MLA: the latent and the RoPE key,
        ``kv_lora_rank + qk_rope_head_dim`` (DeepSeek-V2 §2.1.3; what vLLM and SGLang store), plus
        DSA's indexer key.
        """
        if kind == "linear":
            return 0
        if self.mla is not None:
            elements = self.mla.kv_cache_elements_per_token
            if self.dsa is not None:
                elements += self.dsa.kv_cache_elements_per_token
            return elements
        return 2 * self.kv_width

    def kv_cache_bytes_per_sequence(self, context_len: int, bytes_per_element: float = 2.0) -> float:
        """Cache bytes one sequence of ``context_len`` tokens holds over all layers.

        Full layers grow with the context; sliding layers hold at most ``sliding_window`` tokens;
        linear layers hold a fixed state (:meth:`LinearAttentionSpec.state_bytes_per_sequence`).
        """
        if context_len < 0:
            raise ValueError(f"context_len must be >= 0, but got (context_len={context_len})")
        total = 0.0
        for kind in LAYER_KINDS:
            n = self.n_layers_of_kind(kind)
            if not n:
                continue
            if kind == "linear":
                total += n * self.linear_attention.state_bytes_per_sequence(bytes_per_element)
                continue
            tokens = context_len if kind == "full" else min(context_len, self.sliding_window)
            total += n * tokens * self.kv_cache_elements_per_token_of_kind(kind) * bytes_per_element
        return total

    def kv_cache_bytes_per_token(self, bytes_per_element: float = 2.0, context_len: int | None = None) -> float:
        """KV-cache bytes per token over all layers, at ``bytes_per_element`` (2 for bf16, 1 for fp8).

        Without ``context_len``: what each further token adds at long context (full layers only;
        the sliding and linear layers' share is bounded).  With it: the bytes of a sequence of that
        length divided by its length (:meth:`kv_cache_bytes_per_sequence`).
        """
        if context_len is None:
            return self.n_layers_of_kind("full") * self.kv_cache_elements_per_token_of_kind("full") * bytes_per_element
        if context_len < 1:
            raise ValueError(f"context_len must be >= 1, but got (context_len={context_len})")
        return self.kv_cache_bytes_per_sequence(context_len, bytes_per_element) / context_len

    # --- activations held for backward ------------------------------------------------------
    def attention_activation_bytes_per_token(self, recompute_up_proj: bool = False) -> Mapping[str, float]:
        """Bytes one full or sliding attention block keeps for backward per token at 16 bits, by tensor.

        MLA: :meth:`MLASpec.activation_bytes_per_token`.  GQA (flash-style core): block input,
        normed input, Q, K, V, the core output, the output gate's input when there is one and an
        fp32 log-sum-exp per head; ``recompute_up_proj`` has no GQA counterpart and must be false.
        No TP/SP/CP split and no fp8 caching: the memory model applies those.
        """
        if self.mla is not None:
            return self.mla.activation_bytes_per_token(self.hidden_size, self.n_heads, recompute_up_proj)
        if recompute_up_proj:
            raise ValueError("recompute_up_proj must be false without mla, but got (recompute_up_proj=True)")
        h = self.hidden_size
        parts = {"block_input": 2.0 * h, "normed_input": 2.0 * h, "query": 2.0 * self.q_width,
                 "key": 2.0 * self.kv_width, "value": 2.0 * self.kv_width, "core_output": 2.0 * self.q_width}
        if self.attention_output_gate:
            parts["output_gate"] = 2.0 * self.q_width
        parts["softmax_lse"] = _LSE_BYTES_PER_HEAD * self.n_heads
        return MappingProxyType(parts)


_TOP_KEYS = frozenset(f.name for f in dataclasses.fields(ModelSpec))
_MOE_KEYS = frozenset(f.name for f in dataclasses.fields(MoESpec))
_MLA_KEYS = frozenset(f.name for f in dataclasses.fields(MLASpec))
_DSA_KEYS = frozenset(f.name for f in dataclasses.fields(DSASpec))
_LINEAR_KEYS = frozenset(f.name for f in dataclasses.fields(LinearAttentionSpec))


def _section(data: dict, key: str, keys: frozenset[str], source: str, what: str) -> dict | None:
    raw = data.get(key)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InputError(f"must be a mapping ({what})", source=source, field=key)
    check_keys(raw, keys, source=source, section=key)
    return raw


def _layer_types(data: dict, n_layers: int, source: str) -> tuple[str, ...]:
    """``layer_types``: one kind per layer, or a shorter pattern repeated over the layers."""
    raw = data.get("layer_types")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw or not all(isinstance(k, str) for k in raw):
        raise InputError(f"must be a list of layer kinds ({', '.join(LAYER_KINDS)}), but got {raw!r}",
                         source=source, field="layer_types")
    unknown = sorted(set(raw) - set(LAYER_KINDS))
    if unknown:
        raise InputError(f"must hold only {', '.join(LAYER_KINDS)}, but got {', '.join(unknown)}",
                         source=source, field="layer_types")
    if n_layers % len(raw):
        raise InputError(f"must list {n_layers} kinds or a pattern whose length divides n_layers={n_layers}, "
                         f"but got {len(raw)}", source=source, field="layer_types")
    return tuple(raw) * (n_layers // len(raw))


def model_from_mapping(data: dict, *, source: str) -> ModelSpec:
    check_keys(data, _TOP_KEYS, source=source)
    num = lambda key, **kw: loading.integer(data, key, source=source, **kw)  # noqa: E731
    hidden = num("hidden_size")
    n_heads = num("n_heads")
    n_layers = num("n_layers")
    mla = None
    mla_raw = _section(data, "mla", _MLA_KEYS, source, "kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, q_lora_rank")
    if mla_raw is not None:
        # sections' sizes are bounded as the spec's own (MAX_SIZE): 1e9 had passed here where hidden_size refuses it
        anum = lambda key, **kw: loading.integer(mla_raw, key, source=source, section="mla", maximum=MAX_SIZE, **kw)  # noqa: E731
        try:
            mla = MLASpec(kv_lora_rank=anum("kv_lora_rank"), qk_nope_head_dim=anum("qk_nope_head_dim"),
                          qk_rope_head_dim=anum("qk_rope_head_dim"), v_head_dim=anum("v_head_dim"),
                          q_lora_rank=anum("q_lora_rank", default=None))
        except InputError:
            raise  # a field of the section: it names itself (mla.kv_lora_rank)
        except ValueError as exc:
            raise InputError(str(exc), source=source, field="mla") from None
    head_dim = num("head_dim", default=None)
    if head_dim is None:
        if mla is not None:
            head_dim = mla.qk_head_dim
        elif hidden % n_heads:
            raise InputError(f"hidden_size/n_heads is not whole ({hidden}/{n_heads}); give head_dim explicitly",
                             source=source, field="head_dim")
        else:
            head_dim = hidden // n_heads
    moe = None
    moe_raw = _section(data, "moe", _MOE_KEYS, source, "n_experts, top_k, expert_ffn_hidden_size, ...")
    if moe_raw is not None:
        mnum = lambda key, **kw: loading.integer(moe_raw, key, source=source, section="moe", maximum=MAX_SIZE, **kw)  # noqa: E731
        try:
            moe = MoESpec(
                n_experts=mnum("n_experts"),
                top_k=mnum("top_k"),
                expert_ffn_hidden_size=mnum("expert_ffn_hidden_size"),
                n_shared_experts=mnum("n_shared_experts", minimum=0, default=0),
                shared_expert_ffn_hidden_size=mnum("shared_expert_ffn_hidden_size", minimum=0, default=0),
                layer_interval=mnum("layer_interval", default=1),
                first_dense_layers=mnum("first_dense_layers", minimum=0, default=0),
                routing_groups=mnum("routing_groups", default=1),
                routing_group_topk=mnum("routing_group_topk", default=1),
                router_score=loading.text(moe_raw, "router_score", source=source, section="moe", default="softmax",
                                          choices=ROUTER_SCORES),
                router_expert_bias=loading.boolean(moe_raw, "router_expert_bias", source=source, section="moe",
                                                   default=False),
                router_topk_scaling=loading.number(moe_raw, "router_topk_scaling", source=source, section="moe",
                                                   default=None, maximum=1e3),
                router_aux_loss_coeff=loading.number(moe_raw, "router_aux_loss_coeff", source=source, section="moe",
                                                     default=None, minimum=0.0, maximum=100.0),
            )
        except InputError:
            raise  # a field of the section: it names itself (moe.top_k)
        except ValueError as exc:
            raise InputError(str(exc), source=source, field="moe") from None
    dsa = None
    dsa_raw = _section(data, "dsa", _DSA_KEYS, source, "index_n_heads, index_head_dim, index_topk")
    if dsa_raw is not None:
        dnum = lambda key: loading.integer(dsa_raw, key, source=source, section="dsa", maximum=MAX_SIZE)  # noqa: E731
        dsa = DSASpec(index_n_heads=dnum("index_n_heads"), index_head_dim=dnum("index_head_dim"),
                      index_topk=dnum("index_topk"))
    linear = None
    linear_raw = _section(data, "linear_attention", _LINEAR_KEYS, source,
                          "n_key_heads, key_head_dim, n_value_heads, value_head_dim, conv_kernel")
    if linear_raw is not None:
        lnum = lambda key, **kw: loading.integer(linear_raw, key, source=source, section="linear_attention",  # noqa: E731
                                                 **{"maximum": MAX_SIZE, **kw})
        linear = LinearAttentionSpec(
            n_key_heads=lnum("n_key_heads"), key_head_dim=lnum("key_head_dim"), n_value_heads=lnum("n_value_heads"),
            value_head_dim=lnum("value_head_dim"), conv_kernel=lnum("conv_kernel"),
            recurrent_state_bytes_per_element=lnum("recurrent_state_bytes_per_element", default=4, maximum=8))  # fp64 at most
    n_kv_heads = num("n_kv_heads", default=n_heads)
    n_layers = num("n_layers", maximum=MAX_LAYERS)
    if n_heads % n_kv_heads:
        raise InputError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})", source=source, field="n_kv_heads")
    try:
        return ModelSpec(
            name=loading.text(data, "name", source=source, blank=False),
            n_layers=n_layers,
            hidden_size=hidden,
            ffn_hidden_size=num("ffn_hidden_size"),
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            vocab_size=num("vocab_size"),
            mlp=loading.text(data, "mlp", source=source, default="swiglu", choices=MLP_KINDS),
            tied_embeddings=loading.boolean(data, "tied_embeddings", source=source, default=False),
            max_seq_len=num("max_seq_len", default=None, maximum=2**62),
            norm=loading.text(data, "norm", source=source, default="rmsnorm", choices=NORM_KINDS),
            position_embedding=loading.text(data, "position_embedding", source=source, default="rope", choices=POSITION_KINDS),
            dropout=loading.boolean(data, "dropout", source=source, default=False),
            moe=moe,
            description=loading.text(data, "description", source=source, default=""),
            source=loading.text(data, "source", source=source, default=""),
            mla=mla,
            dsa=dsa,
            linear_attention=linear,
            layer_types=_layer_types(data, n_layers, source),
            sliding_window=num("sliding_window", default=None),
            attention_output_gate=loading.boolean(data, "attention_output_gate", source=source, default=False),
            attention_sinks=loading.boolean(data, "attention_sinks", source=source, default=False),
            mtp_layers=num("mtp_layers", minimum=0, default=0),
            rope_theta=loading.number(data, "rope_theta", source=source, default=None, maximum=1e12),
            rope_scaling=loading.text(data, "rope_scaling", source=source, default=None, choices=ROPE_SCALINGS),
            qk_layernorm=loading.boolean(data, "qk_layernorm", source=source, default=False),
            attention_bias=loading.text(data, "attention_bias", source=source, default="none",
                                        choices=ATTENTION_BIASES),
            qk_norm_per_layer=loading.boolean(data, "qk_norm_per_layer", source=source, default=False),
            rotary_percent=loading.number(data, "rotary_percent", source=source, default=None, maximum=1.0),
        )
    except ValueError as exc:  # the constructor's own checks (sizes in range, heads divide)
        if isinstance(exc, InputError):
            raise
        raise InputError(str(exc), source=source) from None


# Fields added after the first plain-data form of a spec, written only when set, so that the record of a
# model that does not use them (a study's problem, a plans.json) stays as it was.
_OPTIONAL_MOE = {"routing_groups": 1, "routing_group_topk": 1, "router_score": "softmax", "router_expert_bias": False,
                 "router_topk_scaling": None, "router_aux_loss_coeff": None}
_OPTIONAL_FIELDS = ("mla", "dsa", "linear_attention", "layer_types", "sliding_window", "attention_output_gate",
                    "attention_sinks", "mtp_layers", "rope_theta", "rope_scaling", "qk_layernorm", "attention_bias",
                    "qk_norm_per_layer", "rotary_percent")
# What only the launch files read (search.fingerprint leaves them out of a study's problem record, so a study made
# before a spec stated them goes on).
LAUNCH_ONLY_FIELDS = frozenset({"rope_theta", "rope_scaling", "qk_layernorm", "attention_bias", "qk_norm_per_layer",
                                "rotary_percent"})
LAUNCH_ONLY_MOE_FIELDS = frozenset({"router_score", "router_expert_bias", "router_topk_scaling", "router_aux_loss_coeff"})


def without_launch_only(record: Any) -> Any:
    """A spec's plain data (``model_to_mapping``) less what only the launch files read: what an estimate depends on,
    so that a record written before a spec stated them compares equal."""
    if not isinstance(record, Mapping):
        return record
    out = {k: v for k, v in record.items() if k not in LAUNCH_ONLY_FIELDS}
    if isinstance(out.get("moe"), Mapping):
        out["moe"] = {k: v for k, v in out["moe"].items() if k not in LAUNCH_ONLY_MOE_FIELDS}
    return out


def model_to_mapping(model: ModelSpec) -> dict:
    """The spec as plain data (what a spec YAML holds, less description and source): ``model_from_mapping`` reads it
    back.  Studies store it in their problem record and ``plans.json`` embeds it, so either is read from anywhere."""
    out: dict = {}
    for f in dataclasses.fields(model):
        value = getattr(model, f.name)
        if f.name in ("description", "source") or value is None or (f.name in _OPTIONAL_FIELDS and value == f.default):
            continue
        if dataclasses.is_dataclass(value):
            value = {k: v for k, v in dataclasses.asdict(value).items()
                     if v is not None and not (f.name == "moe" and _OPTIONAL_MOE.get(k, ...) == v)}
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def model_names() -> list[str]:
    return bundled_names("models")


def _refuse_unreadable_address(text: str) -> None:
    """A URL is not a path: the address of a file on the Hub (``.../blob/main/config.json``) or any other URL is
    refused saying that autotune fetches nothing, with the id to give (a model the catalogue lists) or the file to
    download, not read as the local path ``https:/...`` and reported missing."""
    import re

    from .catalogue import hf_file_address, is_hf_address, lookup_hf_id

    address = hf_file_address(text)
    if address is not None:
        repo, revision, file = address
        listed = lookup_hf_id(repo)
        if listed is not None:
            pinned = "" if revision == "main" else f" (or {listed.hf_id}@{revision}, that revision)"
            fix = f"give the model's id, {listed.hf_id}{pinned}, or download its config.json and pass that file's path"
        else:
            fix = (f"download the repository's config.json and pass that file's path ({repo} is not in "
                   "profiles/catalogue/hf_models.yaml, so its id alone does not plan)")
        raise InputError(f"a model must be a bundled name, a Hugging Face id or a file on disk; file URLs are not "
                         f"fetched, but got (model={text.strip()!r}, a file of {repo}); {fix}", field="--model")
    if text.strip().lower().startswith("file://"):  # a local file written as a URL: its path is what to give
        raise InputError(f"a model must be a bundled name, a Hugging Face id or a file on disk given by its path, "
                         f"but got (model={text.strip()!r}); give the path without file:// "
                         f"({text.strip()[len('file://'):] or '/path/to/config.json'})", field="--model")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text.strip()) and not is_hf_address(text):
        raise InputError(f"a model must be a bundled name, a Hugging Face id or a file on disk; URLs are not fetched, "
                         f"but got (model={text.strip()!r}); download the config.json and pass that file's path",
                         field="--model")


def load_model(name_or_path: str) -> ModelSpec:
    """A bundled spec by name, a spec YAML by path, a Hugging Face ``config.json``, or a Hugging Face
    id that the bundled catalogue knows (``deepseek-ai/DeepSeek-V3`` -> ``deepseek-v3``)."""
    require_name(name_or_path, kind="models", what="model", field="--model")  # '' would read ./config.json
    _refuse_unreadable_address(name_or_path)
    path = Path(name_or_path)
    if path.suffix == ".json" or (path.is_dir() and (path / "config.json").exists()):
        from .hf_config import spec_mapping_from_hf

        if path.is_dir():
            path = path / "config.json"
        data = loading.read_mapping(path)
        if "plans" in data and "inputs" in data and "model_type" not in data:  # a search's result, not a model
            raise InputError("is a plans.json (a search's result), not a model; give it to `autotune explain`, `emit` "
                             "or `report`, and --model the model's name, spec YAML or config.json", source=str(path))
        return model_from_mapping(spec_mapping_from_hf(data, source=str(path)), source=str(path))
    if "/" in name_or_path and not path.exists() and not (bundled_dir("models") / f"{name_or_path}.yaml").exists():
        from .catalogue import hf_id_problem, resolve_hf_id

        problem = hf_id_problem(name_or_path)
        if problem is not None:  # org/name@main@x: not read as revision "main@x" of org/name
            raise InputError(f"a Hugging Face id must name one repository and at most one revision, but got "
                             f"(model={name_or_path!r}): {problem}", field="--model")
        entry = resolve_hf_id(name_or_path)
        if entry is not None:
            return load_model(entry.spec)
    data, source = read_named("models", name_or_path, what="model", field="--model",
                              alternative="or a Hugging Face id of profiles/catalogue/hf_models.yaml, "
                                          "a path to a spec YAML or a Hugging Face config.json")
    return model_from_mapping(data, source=source)
