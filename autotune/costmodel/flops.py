"""FLOPs of a decoder-only transformer, per token.

Every GEMM of the model is counted (2 FLOPs per multiply-add), following
Narayanan et al. 2021 (SC21, eq. 3) generalised to GQA, explicit head_dim,
SwiGLU and MoE:

* QKV projection ``2*h*(a*d + 2*g*d)``, attention output ``2*a*d*h``;
* attention scores and values ``2*2*s*a*d``, halved for causal attention because
  flash-attention kernels skip the fully masked blocks (``causal=True``, our
  default for time and MFU; Megatron's and NeMo's published formulas count the
  full square, so ``causal=False`` reproduces them);
* MLP ``2*2*h*f`` (GeLU, two matrices) or ``2*3*h*f`` (SwiGLU, three);
  MoE layers count ``top_k`` routed experts, the shared expert(s) and the router;
* logits ``2*h*V`` once per token.

Backward is twice the forward.  Full recomputation adds one forward of the
layers; selective recomputation adds the attention core (Korthikanti et al. 2022).
Model FLOPs (for MFU, PaLM appendix B) exclude recomputation; hardware FLOPs (HFU)
include it.
"""

from __future__ import annotations

from ..inputs.modelspec import ModelSpec


def attention_core_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs of QK^T and PV for one token of one layer."""
    full = 2.0 * 2.0 * seq_len * model.q_width
    return full / 2.0 if causal else full


def layer_gemm_flops_per_token(model: ModelSpec, moe_layer: bool) -> float:
    """Forward FLOPs of one layer's weight GEMMs for one token (attention core excluded)."""
    h = model.hidden_size
    flops = 2.0 * h * (model.q_width + 2 * model.kv_width) + 2.0 * model.q_width * h
    if moe_layer and model.moe:
        moe = model.moe
        flops += 2.0 * model.mlp_matrices * h * moe.expert_ffn_hidden_size * moe.top_k
        flops += 2.0 * model.mlp_matrices * h * moe.shared_expert_ffn_hidden_size
        flops += 2.0 * h * moe.n_experts  # router
    else:
        flops += 2.0 * model.mlp_matrices * h * model.ffn_hidden_size
    return flops


def logits_flops_per_token(model: ModelSpec) -> float:
    return 2.0 * model.hidden_size * model.vocab_size


def forward_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = True) -> float:
    layers = model.n_dense_layers * layer_gemm_flops_per_token(model, moe_layer=False)
    layers += model.n_moe_layers * layer_gemm_flops_per_token(model, moe_layer=True)
    layers += model.n_layers * attention_core_flops_per_token(model, seq_len, causal)
    return layers + logits_flops_per_token(model)


def training_flops_per_token(model: ModelSpec, seq_len: int, recompute: str = "none", causal: bool = True) -> float:
    """Forward + backward (+ recomputation) FLOPs per trained token.

    ``recompute="none"`` gives model FLOPs (MFU); ``"full"`` or ``"selective"``
    give hardware FLOPs (HFU) of that plan.
    """
    forward = forward_flops_per_token(model, seq_len, causal)
    total = 3.0 * forward
    if recompute == "full":
        total += forward - logits_flops_per_token(model)
    elif recompute == "selective":
        total += model.n_layers * attention_core_flops_per_token(model, seq_len, causal)
    elif recompute != "none":
        raise ValueError(f"recompute must be none, selective or full, but got (recompute={recompute!r})")
    return total


def narayanan_eq3_flops_per_iteration(n_layers: int, hidden: int, vocab: int, seq_len: int, global_batch: int) -> float:
    """Narayanan et al. 2021, eq. 3: FLOPs per iteration of a GPT model with full recomputation."""
    l, h, v, s, b = n_layers, hidden, vocab, seq_len, global_batch
    return 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h))
