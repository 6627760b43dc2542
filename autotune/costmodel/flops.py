"""FLOPs of a decoder-only transformer, per token.

Every GEMM of the model is counted (2 FLOPs per multiply-add), following
Narayanan et al. 2021 (SC21, eq. 3) generalised to GQA, explicit head_dim,
SwiGLU, MoE, multi-head latent attention, sliding windows, sparse and linear
attention and multi-token prediction:

* attention projections and core: :meth:`ModelSpec.attention_projection_flops_of_kind`
  and :meth:`ModelSpec.attention_core_flops_of_kind` (GQA: QKV ``2*h*(a*d + 2*g*d)``,
  output ``2*a*d*h``, core ``2*2*s*a*d`` halved for causal attention because
  flash-attention kernels skip the fully masked blocks (``causal=True``, our default
  for time and MFU; Megatron's and NeMo's published formulas count the full square,
  so ``causal=False`` reproduces them); MLA in its non-absorbed training form;
  a sliding layer sees at most its window, a DSA layer its top-k (plus its indexer
  over every key), a Gated DeltaNet layer a fixed cost per token);
* MLP ``2*2*h*f`` (GeLU, two matrices) or ``2*3*h*f`` (SwiGLU, three);
  MoE layers count ``top_k`` routed experts, the shared expert(s) and the router;
* logits ``2*h*V`` once per token;
* each MTP module (DeepSeek-V3 arXiv 2412.19437 §2.2): its projection ``2*2h*h``,
  one block like the last layer (full attention) and the shared head's logits
  ``2*h*V``, as Megatron-LM's ``num_floating_point_operations`` counts them.

Backward is twice the forward.  Full recomputation adds one forward of the
layers; selective recomputation adds the attention core (Korthikanti et al. 2022).
Model FLOPs (for MFU, PaLM appendix B) exclude recomputation; hardware FLOPs (HFU)
include it.
"""

from __future__ import annotations

from ..inputs.modelspec import ModelSpec


def attention_core_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = True, kind: str = "full") -> float:
    """Forward FLOPs of QK^T and PV for one token of one layer of ``kind`` (training form)."""
    return model.attention_core_flops_of_kind(kind, seq_len, causal=causal)


def mlp_flops_per_token(model: ModelSpec, moe_layer: bool) -> float:
    """Forward FLOPs of one layer's MLP (or routed + shared experts and router) for one token."""
    h = model.hidden_size
    if moe_layer and model.moe:
        moe = model.moe
        flops = 2.0 * model.mlp_matrices * h * moe.expert_ffn_hidden_size * moe.top_k
        flops += 2.0 * model.mlp_matrices * h * moe.shared_expert_ffn_hidden_size
        return flops + 2.0 * h * moe.n_experts  # router
    return 2.0 * model.mlp_matrices * h * model.ffn_hidden_size


def layer_gemm_flops_per_token(model: ModelSpec, moe_layer: bool, kind: str = "full") -> float:
    """Forward FLOPs of one layer's weight GEMMs for one token (attention core excluded)."""
    return model.attention_projection_flops_of_kind(kind) + mlp_flops_per_token(model, moe_layer)


def logits_flops_per_token(model: ModelSpec) -> float:
    return 2.0 * model.hidden_size * model.vocab_size


def mtp_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs of the model's MTP modules for one token (0 without MTP).

    Each: the projection of ``[norm(h); norm(embedding)]`` (2h -> h), one full-attention
    block whose MLP is that of the last layer (MoE for DeepSeek-V3), and the logits of the
    shared output head.
    """
    if not model.mtp_layers:
        return 0.0
    h = model.hidden_size
    block = layer_gemm_flops_per_token(model, model.mtp_block_is_moe, "full")
    block += attention_core_flops_per_token(model, seq_len, causal, "full")
    return model.mtp_layers * (2.0 * 2 * h * h + block + logits_flops_per_token(model))


def forward_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = True, mtp: bool = True) -> float:
    """Forward FLOPs of the whole model for one token of a sequence of ``seq_len`` (MTP modules with ``mtp``)."""
    layers = model.attention_projection_flops_per_token()
    layers += model.n_dense_layers * mlp_flops_per_token(model, moe_layer=False)
    layers += model.n_moe_layers * mlp_flops_per_token(model, moe_layer=True)
    layers += model.attention_core_flops_per_token(seq_len, causal=causal)
    total = layers + logits_flops_per_token(model)
    if mtp:
        total += mtp_flops_per_token(model, seq_len, causal)
    return total


def training_flops_per_token(model: ModelSpec, seq_len: int, recompute: str = "none", causal: bool = True,
                             mtp: bool = True) -> float:
    """Forward + backward (+ recomputation) FLOPs per trained token.

    ``recompute="none"`` gives model FLOPs (MFU); ``"full"`` or ``"selective"``
    give hardware FLOPs (HFU) of that plan.  ``mtp`` counts the model's MTP
    modules (trained with the model, as DeepSeek-V3 was); without MTP modules it
    changes nothing.
    """
    forward = forward_flops_per_token(model, seq_len, causal, mtp)
    total = 3.0 * forward
    n_mtp = model.mtp_layers if mtp else 0
    if recompute == "full":
        total += forward - (1 + n_mtp) * logits_flops_per_token(model)
    elif recompute == "selective":
        total += model.attention_core_flops_per_token(seq_len, causal=causal)
        total += n_mtp * attention_core_flops_per_token(model, seq_len, causal, "full")
    elif recompute != "none":
        raise ValueError(f"recompute must be none, selective or full, but got (recompute={recompute!r})")
    return total


def narayanan_eq3_flops_per_iteration(n_layers: int, hidden: int, vocab: int, seq_len: int, global_batch: int) -> float:
    """Narayanan et al. 2021, eq. 3: FLOPs per iteration of a GPT model with full recomputation."""
    l, h, v, s, b = n_layers, hidden, vocab, seq_len, global_batch
    return 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h))
