"""Serving review, round 8: launch files checked against what the engines' own resolvers do with them."""

from __future__ import annotations

import json
import re

import numpy as np
from typer.testing import CliRunner

from autotune.cli import app
from autotune.serving import engines as E

runner = CliRunner()


def _emit_sglang(plan: str, hardware: str, gpus: int, *extra: str) -> str:
    result = runner.invoke(app, ["emit", plan, "-f", "sglang", "-m", "deepseek-v3", "-H", hardware, "--gpus",
                                 str(gpus), "--input-len", "2048", "--output-len", "1024", "--checkpoint", "fp8",
                                 *extra])
    assert result.exit_code == 0, result.output
    return result.stdout


def _chunks(script: str) -> set[int]:
    return {int(v) for v in re.findall(r"--chunked-prefill-size (\d+)", script)}


def test_sglang_attention_dp_chunk_is_whole_kv_pages_a_rank_on_blackwell():
    """SGLang gives each attention-DP rank chunked_prefill_size // dp tokens and asserts that this is a multiple
    of the KV page, which its default Blackwell kernels (trtllm_mla, trtllm_mha) make 64 tokens: DP72 on a GB200
    rack at the default 16,384 gets 227 a rank and does not start.  The launch file writes 72 x 192 = 13,824 (three
    pages a rank), and the estimate prefills 192 tokens a rank, not 227."""
    plan = "tp=1,dp=72,ep=72,weights=fp8,kv=fp8,max_batch=4104"
    assert _chunks(_emit_sglang(plan, "gb200-nvl72", 72)) == {13824}
    assert 16384 // 72 == 227 and 227 // 64 * 64 == 192 and 192 * 72 == 13824  # the hand check
    # a power-of-two DP keeps SGLang's default; on Hopper (one-token pages) DP24 keeps 8,192 (341 a rank)
    assert _chunks(_emit_sglang("tp=1,dp=32,ep=32,weights=fp8,kv=fp8,max_batch=4096", "gb200-nvl72", 32)) == {16384}
    assert _chunks(_emit_sglang("tp=1,dp=24,ep=24,weights=fp8,kv=fp8,max_batch=1920", "h200-sxm-141gb", 24)) == {8192}
    # a disaggregated plan: each pool's servers their own (DP12 prefill: 12 x 1,344; DP8 decode: 16,384)
    disagg = _emit_sglang("prefill_workers=1,prefill_dp=12,prefill_ep=12,decode_workers=1,decode_dp=8,decode_ep=8,"
                          "weights=fp8,kv=fp8,max_batch=1024", "b200-sxm-180gb", 20, "--gpus-per-node", "4")
    assert _chunks(disagg) == {12 * 1344, 16384} and 16384 // 12 // 64 * 64 == 1344
    # the estimate's chunk a rank is the launched one
    d = E.DEFAULTS["sglang"]
    page = E.sglang_kv_page_tokens(10.0)
    assert page == 64.0 and E.sglang_kv_page_tokens(9.0) == 1.0
    assert float(d.prefill_chunk(185.0, np.array([72.0]), "gb200-nvl72", moe=True, page=page)[0]) == 192.0
    assert float(d.prefill_chunk(141.0, np.array([24.0]), "h200-sxm-141gb", moe=True, page=1.0)[0]) == 341.0
    # a dense engine's --dp-size ranks keep the whole chunk (SGLang divides only with attention DP)
    assert float(d.server_chunk(185.0, np.array([6.0]), "gb200-nvl72", moe=False, page=page)[0]) == 16384.0
    # vLLM's ranks are not divided
    assert float(E.DEFAULTS["vllm"].server_chunk(185.0, np.array([72.0]), "gb200-nvl72", moe=True,
                                                 page=page)[0]) == 16384.0


def test_sglang_blackwell_chunk_reaches_the_memory_fraction():
    """SGLang's reserve counts 1.5 MiB per token of the chunk it is launched with, so the memory fraction of the
    DP72 launch file is that of 13,824 tokens: 3,840 MiB less reserve than 16,384 would give."""
    result = runner.invoke(app, ["predict", "--workload", "serve", "-m", "deepseek-v3", "-H", "gb200-nvl72",
                                 "--gpus", "72", "--input-len", "2048", "--output-len", "1024", "--checkpoint", "fp8",
                                 "--engine", "sglang", "-p", "tp=1,dp=72,ep=72,weights=fp8,kv=fp8,max_batch=4104",
                                 "--json"])
    assert result.exit_code == 0, result.output
    knob = json.loads(result.stdout)["estimate"]["engine_memory_flag"]["--mem-fraction-static"]
    mib = (512.0 + 13824 * 1.5 + 72 / 8 * 1024 + 57 * 2.0 + 57 * 72 * 3.0 + 1536.0 + 1024.0) + 2048.0
    assert knob == np.floor((185 * 1024 - mib) / (185 * 1024) * 1000) / 1000


def test_a_profile_without_compute_capability_gets_a_chunk_every_sglang_backend_accepts(tmp_path):
    """A user's own profile that leaves compute_capability out may describe a Blackwell GPU, whose SGLang kernels
    take 64-token pages: its rank's chunk is whole 64-token pages (valid for one-token pages too), not the 227
    tokens a rank SGLang would refuse at DP72."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "profiles" / "hardware" / "gb200-nvl72.yaml").read_text()
    text = re.sub(r"(?m)^compute_capability:.*\n", "", text).replace("name: gb200-nvl72", "name: my-rack")
    assert "compute_capability:" not in text.split("sources:")[0]
    profile = tmp_path / "my-rack.yaml"
    profile.write_text(text)
    assert E.sglang_kv_page_tokens(None) == 64.0
    script = _emit_sglang("tp=1,dp=72,ep=72,weights=fp8,kv=fp8,max_batch=4104", str(profile), 72)
    assert _chunks(script) == {13824} and (13824 // 72) % 64 == 0


def test_sglang_prefill_graph_reserve_counts_the_whole_chunk_under_attention_dp():
    """SGLang 0.5.23's memory hook runs before handle_data_parallelism divides --chunked-prefill-size among the
    attention-DP ranks (arg_groups/pipeline.py), so its prefill-graph reserve counts the token counts up to the
    server's whole chunk; with DeepEP the list was fixed earlier (apply_deepep_adjustments: up to 2,048, rounded up to
    multiples of 8) and stays 38 long.  Mixtral, --tp-size 8 with DP4 attention, an 80 GiB H100 (81,559 MiB as the
    driver reports it), a prefill server (MiB): 512 + 1.5 x chunk + 1,024 (8 GPUs) + 8 x graphs (+ 1,024 DeepEP).
    SGLang's own resolver gave 0.673, 0.664 and 0.814 for these three servers."""
    gpu_mib = 81559.0

    def fraction(chunk, ep):
        reserved = float(E.sglang_reserved_bytes(chunk, 2.0, 1.0, 4.0, 128.0, gpu_mib * E.MIB, moe=True, ep=ep,
                                                 mla=False, role=E.ROLE_PREFILL)) / E.MIB
        return reserved, round((gpu_mib - reserved) / gpu_mib, 3)

    # without DeepEP (ep below tp*dp): 74 counts up to 16,384 (8 + 14 + 8 + 8 + 12 + 24), not the 50 up to the 4,096
    # a rank runs
    assert fraction(16384.0, 4.0) == (512 + 16384 * 1.5 + 1024 + 74 * 8, 0.673)
    # with DeepEP: 38 counts whatever the chunk
    assert fraction(16384.0, 8.0) == (512 + 16384 * 1.5 + 1024 + 38 * 8 + 1024, 0.664)
    assert fraction(8192.0, 8.0) == (512 + 8192 * 1.5 + 1024 + 38 * 8 + 1024, 0.814)


def test_deepseek_sparse_attention_takes_64_token_pages_on_hopper_too():
    """SGLang runs a model with DeepSeek sparse attention (GLM-5) on its dsa backend with 64-token pages on any CUDA
    GPU (arg_groups/model_overrides/deepseek_v2.py), so an H200 attention-DP server needs whole 64-token pages a
    rank too: 8,192 over DP12 is 682 a rank, which SGLang 0.5.23 refuses ("chunked_prefill_size must be divisible by
    page_size"); 682 // 64 x 64 = 640 a rank, 12 x 640 = 7,680, which it accepts.  DeepSeek-V3 (MLA without the
    indexer) keeps one-token pages on Hopper."""
    assert E.sglang_kv_page_tokens(9.0, dsa=True) == 64.0 and E.sglang_kv_page_tokens(9.0) == 1.0
    result = runner.invoke(app, ["emit", "tp=1,dp=12,ep=12,weights=fp8,kv=fp8,max_batch=768", "-f", "sglang", "-m",
                                 "glm-5", "-H", "h200-sxm-141gb", "--gpus", "12", "--gpus-per-node", "4",
                                 "--input-len", "2048", "--output-len", "1024", "--checkpoint", "fp8"])
    assert result.exit_code == 0, result.output
    assert _chunks(result.stdout) == {7680} and 8192 // 12 == 682 and 682 // 64 * 64 * 12 == 7680
    d = E.DEFAULTS["sglang"]
    assert float(d.prefill_chunk(141.0, np.array([12.0]), "h200-sxm-141gb", moe=True, page=64.0)[0]) == 640.0
    hopper_mla = _emit_sglang("tp=1,dp=24,ep=24,weights=fp8,kv=fp8,max_batch=1920", "h200-sxm-141gb", 24)
    assert _chunks(hopper_mla) == {8192}
