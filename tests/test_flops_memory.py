"""Hand-checked values of the cost model's closed-form pieces: FLOPs, activation and
model-state memory, and collective times.

Every expected number below is worked out by hand in the comments (plain integer
arithmetic on the published shapes), never by calling the code under test.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autotune.costmodel import comm
from autotune.costmodel.comm import Topology
from autotune.costmodel.flops import (
    attention_core_flops_per_token,
    narayanan_eq3_flops_per_iteration,
    training_flops_per_token,
)
from autotune.inputs.hardware import Cluster, Efficiency, Link, load_hardware
from autotune.inputs.modelspec import ModelSpec, load_model
from autotune.training.memory import (
    activation_bytes_per_layer,
    korthikanti_activation_bytes,
    model_state_bytes,
)

# --- FLOPs -----------------------------------------------------------------------------------

# Llama 3 8B: L=32, h=4096, a=32, g=8, d=128, f=14336 (SwiGLU), V=128256; s=8192.
#   QKV          2*h*(a*d + 2*g*d) = 2*4096*(4096 + 2048)  =    50,331,648
#   attn out     2*a*d*h           = 2*4096*4096           =    33,554,432
#   MLP          2*3*h*f           = 6*4096*14336          =   352,321,536
#   GEMMs per layer                                         =   436,207,616
#   attention    2*s*a*d (causal: half of 4*s*a*d)          =    67,108,864
#   per layer                                               =   503,316,480
#   32 layers                                               = 16,106,127,360
#   logits       2*h*V = 2*4096*128256                      =  1,050,673,152
#   forward                                                 = 17,156,800,512
#   training (fwd + 2x bwd) = 3 * forward                   = 51,470,401,536
LLAMA3_8B_FORWARD = 17_156_800_512
LLAMA3_8B_LAYERS = 16_106_127_360
LLAMA3_8B_ATTENTION_PER_LAYER = 67_108_864


def test_llama3_8b_training_flops_per_token():
    spec = load_model("llama3-8b")
    assert training_flops_per_token(spec, 8192) == pytest.approx(51_470_401_536, rel=1e-12)
    assert training_flops_per_token(spec, 8192) == pytest.approx(3 * LLAMA3_8B_FORWARD, rel=1e-12)


def test_llama3_8b_attention_core_is_halved_for_causal():
    spec = load_model("llama3-8b")
    # 2*2*s*a*d = 4*8192*4096 = 134,217,728 for the full square; half when causal.
    assert attention_core_flops_per_token(spec, 8192, causal=False) == 134_217_728
    assert attention_core_flops_per_token(spec, 8192, causal=True) == LLAMA3_8B_ATTENTION_PER_LAYER


def test_llama3_8b_recomputation_adds_forward_or_attention():
    spec = load_model("llama3-8b")
    # Full recomputation repeats the layers' forward (not the logits):
    #   51,470,401,536 + 16,106,127,360 = 67,576,528,896
    assert training_flops_per_token(spec, 8192, "full") == pytest.approx(67_576_528_896, rel=1e-12)
    # Selective recomputation repeats the attention core: + 32 * 67,108,864 = + 2,147,483,648
    assert training_flops_per_token(spec, 8192, "selective") == pytest.approx(53_617_885_184, rel=1e-12)
    with pytest.raises(ValueError):
        training_flops_per_token(spec, 8192, "sometimes")


def gpt3_175b(**overrides) -> ModelSpec:
    """GPT-3 175B as Narayanan et al. 2021 and Korthikanti et al. 2022 use it (padded vocab 51200)."""
    values = dict(name="gpt3-175b-test", n_layers=96, hidden_size=12288, ffn_hidden_size=4 * 12288, n_heads=96,
                  n_kv_heads=96, head_dim=128, vocab_size=51200, mlp="gelu", tied_embeddings=True,
                  norm="layernorm", position_embedding="learned", dropout=True)
    values.update(overrides)
    return ModelSpec(**values)


def test_bundled_gpt3_has_the_papers_shapes():
    bundled = load_model("gpt3-175b")
    for key in ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "head_dim", "vocab_size",
                "mlp", "dropout"):
        assert getattr(bundled, key) == getattr(gpt3_175b(), key), key


# Narayanan et al. 2021, eq. 3 for GPT-3 175B (L=96, h=12288, V=51200, s=2048, B=1536):
#   96*B*s*L*h^2 = 96*1536*2048*96*12288^2          = 4,377,498,837,804,122,112
#   1 + s/(6h) + V/(16*L*h) = 1 + 2048/73728 + 51200/18874368
#                           = 1 + 1/36 + 25/9216     (= 1.030490451388...)
#   product                                            = 4,510,970,753,323,106,304 (exact: the fractions
#   divide 4,377,498,837,804,122,112 evenly: /36 = 121,597,189,939,003,392 and *25/9216 = 11,874,725,579,980,800)
NARAYANAN_GPT3 = 4_377_498_837_804_122_112 + 121_597_189_939_003_392 + 11_874_725_579_980_800


def test_narayanan_eq3_hand_value():
    assert NARAYANAN_GPT3 == 4_510_970_753_323_106_304
    assert narayanan_eq3_flops_per_iteration(96, 12288, 51200, 2048, 1536) == pytest.approx(NARAYANAN_GPT3, rel=1e-12)


@pytest.mark.parametrize("spec", [gpt3_175b(), load_model("gpt3-175b")], ids=["constructed", "bundled"])
def test_flops_per_token_reproduces_narayanan_eq3(spec):
    # Eq. 3 counts full recomputation and the full (non-causal) attention square.
    B, s = 1536, 2048
    ours = training_flops_per_token(spec, s, "full", causal=False) * B * s
    assert ours == pytest.approx(narayanan_eq3_flops_per_iteration(96, 12288, 51200, s, B), rel=1e-9)
    assert ours == pytest.approx(NARAYANAN_GPT3, rel=1e-9)


# DeepSeek-V3 (arXiv 2412.19437 §4.2): h=7168, a=128, r_q=1536, r_kv=512, d_nope=128, d_rope=64, d_v=128,
# 61 layers (3 dense of f=18432, 58 MoE: 256 experts of f=2048, top-8, 1 shared), V=129280, 1 MTP module; s=4096.
#   MLA projections  2*(11,010,048 + 37,748,736 + 4,128,768 + 16,777,216 + 117,440,512) = 374,210,560
#   MLA core         (2*128*192 + 2*128*128) * 4096/2 = 81,920 * 2,048                  = 167,772,160
#   dense MLP        6*7168*18432                                                        = 792,723,456
#   MoE MLP          6*7168*2048*(8+1) + router 2*7168*256 = 792,723,456 + 3,670,016     = 796,393,472
#   logits           2*7168*129280                                                       = 1,853,358,080
#   layers  61*(374,210,560 + 167,772,160) + 3*792,723,456 + 58*796,393,472              = 81,629,937,664
#   forward without MTP                                                                   = 83,483,295,744
#   MTP     2*2*7168^2 + (374,210,560 + 796,393,472 + 167,772,160) + 1,853,358,080        = 3,397,255,168
#   forward with MTP                                                                      = 86,880,550,912
#   training = 3 * forward                                                                = 260,641,652,736
DEEPSEEK_V3_TRAINING = 260_641_652_736


def test_deepseek_v3_training_flops_per_token():
    spec = load_model("deepseek-v3")
    assert training_flops_per_token(spec, 4096) == pytest.approx(DEEPSEEK_V3_TRAINING, rel=1e-12)
    assert training_flops_per_token(spec, 4096, mtp=False) == pytest.approx(3 * 83_483_295_744, rel=1e-12)
    # Megatron-LM num_floating_point_operations (megatron-core 0.19.2, megatron/training/training.py), which
    # Megatron-Bridge's published TFLOP/s reproduce to 0.2% (research note: implied 259.9-260.6 GFLOP/token):
    #   6 * [62 * (1536*(7168 + 128*192 + 1) + 512*(7168 + 128*256 + 1) + 7168*64 + 128*128*7168)
    #        + 7168*(3*18432*3 + 3*2048*8*59 + 3*2048*59) + (3*7168 + 2*7168^2) + 7168*129280*2]
    #   + 6 * 62 * 4096 * (128*192/2 + 128*128/2)                                   = 259,992,950,784
    # It leaves out the router (3 * 59 * 2*7168*256 = 649,592,832) and counts the norm weights.
    router = 3 * 59 * 2 * 7168 * 256
    assert DEEPSEEK_V3_TRAINING - router == pytest.approx(259_992_950_784, rel=1e-5)
    # The 6N rule with N = 37B activated, plus the attention core and the MTP module it leaves out:
    #   6 * 37e9 + 3 * 61 * 167,772,160 + 3 * 3,397,255,168 = 222.0 + 30.7 + 10.2 = 262.9 GFLOP (ours 1% lower:
    #   "37B" counts the input embedding, a lookup)
    assert DEEPSEEK_V3_TRAINING == pytest.approx(6 * 37e9 + 3 * 61 * 167_772_160 + 3 * 3_397_255_168, rel=0.015)


def test_deepseek_v3_recomputation_counts_the_mtp_block():
    spec = load_model("deepseek-v3")
    # Selective: the attention core of 61 layers and the MTP block, 62 * 167,772,160 = 10,401,873,920
    assert training_flops_per_token(spec, 4096, "selective") == pytest.approx(DEEPSEEK_V3_TRAINING + 10_401_873_920,
                                                                              rel=1e-12)
    # Full: one more forward without the logits of the head and of the MTP head: 86,880,550,912 - 2*1,853,358,080
    assert training_flops_per_token(spec, 4096, "full") == pytest.approx(DEEPSEEK_V3_TRAINING + 83_173_834_752, rel=1e-12)


def test_gpt_oss_training_flops_bound_sliding_layers():
    spec = load_model("gpt-oss-120b")
    # h=2880, 64 heads of 64, 8 KV heads, 128 experts of 2880 (top-4), V=201088; s=4096:
    #   projections 2*2880*(4096 + 2*512) + 2*4096*2880 = 29,491,200 + 23,592,960 = 53,084,160 per layer
    #   MoE 6*2880*2880*4 + router 2*2880*128 = 199,065,600 + 737,280 = 199,802,880 per layer
    #   core full 33,554,432, sliding 2,064,640 (tests/test_attention_kinds.py)
    #   forward = 36*(53,084,160 + 199,802,880) + 18*(33,554,432 + 2,064,640) + 2*2880*201088
    #           = 9,103,933,440 + 641,143,296 + 1,158,266,880 = 10,903,343,616
    assert training_flops_per_token(spec, 4096) == pytest.approx(3 * 10_903_343_616, rel=1e-12)
    # As if every layer were full: 18 * (33,554,432 - 2,064,640) more forward core FLOPs.
    full = dataclasses.replace(spec, layer_types=(), sliding_window=None)
    assert training_flops_per_token(full, 4096) - training_flops_per_token(spec, 4096) == pytest.approx(
        3 * 18 * (33_554_432 - 2_064_640), rel=1e-12)


# --- activation memory (Korthikanti et al. 2022, Table 2) ------------------------------------

# Their GPT-3 175B setting: s=2048, b=1, h=12288, a=96, t=8.
#   sbh = 2048*12288 = 25,165,824;  5*a*s/h = 5*96*2048/12288 = 80
#   no parallelism:        sbh*(34 + 80)            = 114 sbh = 2,868,903,936
#   TP, no SP:             sbh*(10 + 24/8 + 80/8)   =  23 sbh =   578,813,952
#   TP + SP:               sbh/8*(34 + 80)          = 14.25 sbh = 358,612,992
#   TP + SP, selective:    sbh/8*34                 = 4.25 sbh =  106,954,752
#   TP, no SP, selective:  sbh*(10 + 24/8)          =  13 sbh =   327,155,712
#   full recomputation:    2*sbh                    =             50,331,648 (the layer input; with SP
#                          it is the sequence-parallel shard, 2*sbh/8 = 6,291,456)
S, B_MICRO, H, A, T = 2048, 1, 12288, 96, 8
SBH = 25_165_824


@pytest.mark.parametrize("t, sp, recompute, expected", [
    (1, False, "none", 2_868_903_936),
    (T, False, "none", 578_813_952),
    (T, True, "none", 358_612_992),
    (T, True, "selective", 106_954_752),
    (T, False, "selective", 327_155_712),
    (T, False, "full", 50_331_648),
    (T, True, "full", 6_291_456),
])
def test_korthikanti_reference_formula(t, sp, recompute, expected):
    assert SBH == S * B_MICRO * H
    assert korthikanti_activation_bytes(S, B_MICRO, H, A, t, sp, recompute) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("sp, stored, expected", [
    (False, True, 578_813_952),   # 23 sbh
    (True, True, 358_612_992),    # 14.25 sbh
    (True, False, 106_954_752),   # scores not stored (selective / flash): 34 sbh / t
    (False, False, 327_155_712),  # 13 sbh
])
def test_activation_bytes_per_layer_reproduces_korthikanti_for_gpt3(sp, stored, expected):
    spec = gpt3_175b()
    got = activation_bytes_per_layer(spec, np.array([S * B_MICRO], dtype=float), np.array([S], dtype=float),
                                     np.array([T], dtype=float), np.array([sp]), False, attention_scores_stored=stored)
    assert got.shape == (1,)
    assert float(got[0]) == pytest.approx(expected, rel=1e-12)
    assert float(got[0]) == pytest.approx(korthikanti_activation_bytes(S, B_MICRO, H, A, T, sp, "none" if stored else "selective"),
                                          rel=1e-12)


def test_activation_bytes_per_layer_without_tp_is_34_sbh_plus_scores():
    spec = gpt3_175b()
    got = activation_bytes_per_layer(spec, np.array([2048.0]), np.array([2048.0]), np.array([1.0]), np.array([False]),
                                     False, attention_scores_stored=True)
    assert float(got[0]) == pytest.approx(114 * SBH, rel=1e-12)


def test_activation_bytes_without_dropout_drop_two_sbh():
    # No dropout: the two dropout masks (sbh each) leave the replicated part: 10 -> 8 sbh (t=1, no scores).
    got = activation_bytes_per_layer(gpt3_175b(dropout=False), np.array([2048.0]), np.array([2048.0]),
                                     np.array([1.0]), np.array([False]), False)
    assert float(got[0]) == pytest.approx(32 * SBH, rel=1e-12)


# --- model-state memory (ZeRO, Rajbhandari et al. 2020) ---------------------------------------

# Psi = 7.5e9 parameters, N_d = 64, 2-byte gradients (the paper's K=12 accounting):
#   baseline  (2 + 2 + 12) * Psi            = 120e9
#   ZeRO-1    2 Psi + 2 Psi + 12 Psi/64      =  30e9 + 1.40625e9  = 31.40625e9  (paper: 31.4 GB)
#   ZeRO-2    2 Psi + (2 + 12) Psi/64        =  15e9 + 1.640625e9 = 16.640625e9 (paper: 16.6 GB)
#   ZeRO-3    (2 + 2 + 12) Psi/64            =  1.875e9                          (paper: 1.9 GB)
PSI, ND = 7.5e9, 64


@pytest.mark.parametrize("zero, expected, paper", [
    (0, 120e9, 120), (1, 31.40625e9, 31.4), (2, 16.640625e9, 16.6), (3, 1.875e9, 1.9),
])
def test_zero_paper_figures_with_two_byte_gradients(zero, expected, paper):
    parts = model_state_bytes(np.array([PSI]), np.array([ND]), np.array([zero]), grad_bytes=2.0)
    total = float(sum(v[0] for v in parts.values()))
    assert total == pytest.approx(expected, rel=1e-12)
    assert round(total / 1e9, 1) == paper


# Default accounting: 4-byte fp32 gradients (Megatron / FSDP), so 18 bytes per parameter unsharded:
#   ZeRO-0   18 Psi                       = 135e9
#   ZeRO-1   2 Psi + 4 Psi + 12 Psi/64     = 45e9 + 1.40625e9 = 46.40625e9
#   ZeRO-2   2 Psi + 16 Psi/64             = 15e9 + 1.875e9   = 16.875e9
#   ZeRO-3   18 Psi/64                     = 2.109375e9
@pytest.mark.parametrize("zero, weights, grads, optimizer", [
    (0, 15e9, 30e9, 90e9),
    (1, 15e9, 30e9, 1.40625e9),
    (2, 15e9, 0.46875e9, 1.40625e9),
    (3, 0.234375e9, 0.46875e9, 1.40625e9),
])
def test_zero_default_four_byte_gradients(zero, weights, grads, optimizer):
    parts = model_state_bytes(np.array([PSI]), np.array([ND]), np.array([zero]))
    assert float(parts["weights"][0]) == pytest.approx(weights, rel=1e-12)
    assert float(parts["gradients"][0]) == pytest.approx(grads, rel=1e-12)
    assert float(parts["optimizer"][0]) == pytest.approx(optimizer, rel=1e-12)
    total = {0: 135e9, 1: 46.40625e9, 2: 16.875e9, 3: 2.109375e9}[zero]
    assert float(sum(v[0] for v in parts.values())) == pytest.approx(total, rel=1e-12)


def test_optimizer_offload_removes_optimizer_state_only():
    # Megatron distributed optimizer (ZeRO-1) on 8 ranks: 6 + 12/8 = 7.5 bytes/param; offload leaves 6.
    parts = model_state_bytes(np.array([1e9, 1e9]), np.array([8, 8]), np.array([1, 1]), np.array([False, True]))
    totals = sum(parts.values())
    assert totals[0] == pytest.approx(7.5e9, rel=1e-12)
    assert totals[1] == pytest.approx(6.0e9, rel=1e-12)


# --- communication ----------------------------------------------------------------------------

def hand_cluster(n_gpus: int = 64) -> Cluster:
    """An A100-like node of 8 with round numbers, so the expected times are easy to check by hand:
    NVLink 300 GB/s at 0.8 -> 240 GB/s bus bandwidth, 2 us per hop; NIC 25 GB/s at 0.9 -> 22.5 GB/s, 10 us."""
    hw = dataclasses.replace(
        load_hardware("a100-sxm4-80gb"),
        intra_node=Link(bandwidth_gb_per_s=300.0, latency_us=2.0),
        inter_node=Link(bandwidth_gb_per_s=25.0, latency_us=10.0),
        efficiency=Efficiency(intra_node_bandwidth=0.8, inter_node_bandwidth=0.9),
    )
    return Cluster(hw, n_gpus, 8)


M = 1e9  # bytes
INTRA, INTER = 240e9, 22.5e9


def t(n, stride, fn=comm.all_reduce_s, cluster=None):
    return float(fn(np.array([M]), Topology(np.array([n]), np.array([stride]), 8), cluster or hand_cluster())[0])


def test_all_reduce_inside_one_node():
    # 8 ranks on NVLink: 2*(n-1)/n*M/BW + 2*(n-1)*alpha = 2*7/8*1e9/240e9 + 14*2e-6
    assert t(8, 1) == pytest.approx(1.75 / 240 + 28e-6, rel=1e-12)
    # 4 ranks, stride 2 (e.g. the CP group of tp=2), still one node: 2*3/4*1e9/240e9 + 6*2e-6
    assert t(4, 2) == pytest.approx(1.5 / 240 + 12e-6, rel=1e-12)
    # 2 ranks: 2*1/2*1e9/240e9 + 2*2e-6
    assert t(2, 1) == pytest.approx(1.0 / 240 + 4e-6, rel=1e-12)


def test_all_reduce_of_one_rank_is_free():
    assert t(1, 1) == 0.0


def test_all_reduce_one_rank_per_node():
    # 16 ranks 8 apart: one per node, 16 nodes.  Inter-node ring 2*(k-1)/k*M/(per_node*NIC)
    # = 2*15/16*1e9/22.5e9 = 1.875/22.5; latency: no NVLink hops, tree 2*ceil(log2 16) = 8 hops * 10 us.
    assert t(16, 8) == pytest.approx(1.875 / 22.5 + 80e-6, rel=1e-12)


def test_all_reduce_across_nodes_nic_bound():
    # 32 ranks 2 apart: per_node = 8//2 = 4, nodes = 8.
    #   intra 2*3/4*1e9/240e9 = 1.5/240 = 6.25 ms;  inter 2*7/8*1e9/(4*22.5e9) = 1.75/90 = 19.44 ms -> inter binds
    #   latency 2*(4-1)*2 us + 2*ceil(log2 8)*10 us = 12 + 60 us
    assert t(32, 2) == pytest.approx(1.75 / 90 + 72e-6, rel=1e-12)


def test_all_reduce_across_nodes_nvlink_bound():
    # 16 consecutive ranks: per_node 8, 2 nodes.
    #   intra 2*7/8/240 = 7.29 ms; inter 2*1/2*1e9/(8*22.5e9) = 1/180 = 5.56 ms -> NVLink binds
    #   latency 2*7*2 us + 2*1*10 us = 48 us
    assert t(16, 1) == pytest.approx(1.75 / 240 + 48e-6, rel=1e-12)


def test_all_gather_and_reduce_scatter_are_half_an_all_reduce_bandwidth():
    # Per comm.py: half the all-reduce's bandwidth term; ring latency of n-1 steps (no tree in NCCL for
    # these), nodes-1 of them across nodes at the network latency, the rest on NVLink.
    # 8 ranks in a node: (n-1)/n*M/BW + (n-1)*alpha = 7/8/240 + 7*2 us
    assert t(8, 1, comm.all_gather_s) == pytest.approx(0.875 / 240 + 14e-6, rel=1e-12)
    assert t(8, 1, comm.reduce_scatter_s) == pytest.approx(0.875 / 240 + 14e-6, rel=1e-12)
    # one rank per node, 16 nodes: 15/16*1e9/22.5e9; 15 ring steps, all across nodes: 15 * 10 us
    assert t(16, 8, comm.all_gather_s) == pytest.approx(0.9375 / 22.5 + 150e-6, rel=1e-12)
    # 16 consecutive ranks on 2 nodes: intra 7/8*1e9/240e9 = 3.65 ms beats inter 1/2*1e9/(8*22.5e9) = 2.78 ms;
    # 15 ring steps: 1 across nodes (10 us) + 14 on NVLink (28 us)
    assert t(16, 1, comm.all_gather_s) == pytest.approx(0.875 / 240 + 38e-6, rel=1e-12)


def test_point_to_point():
    cluster = hand_cluster()
    got = comm.point_to_point_s(np.array([M, M]), np.array([False, True]), cluster)
    assert got[0] == pytest.approx(1e9 / 240e9 + 2e-6, rel=1e-12)
    assert got[1] == pytest.approx(1e9 / 22.5e9 + 10e-6, rel=1e-12)


def test_topology_placement():
    topo = Topology(np.array([8, 16, 32, 64]), np.array([1, 8, 2, 1]), 8)
    np.testing.assert_array_equal(topo.per_node, [8, 1, 4, 8])
    np.testing.assert_array_equal(topo.nodes, [1, 16, 8, 8])
