"""What one GPU's kernels reach, measured with PyTorch, against the serving model's physical fractions.

The serving model (``autotune/serving/estimate.py``) prices a prefill by the GEMM and attention FLOPs at a
fraction of the dense tensor-core peak (``gemm``, ``attention``) and a decode step by the weight and KV-cache
bytes at a fraction of HBM bandwidth (``weight_bandwidth``, ``kv_bandwidth``), plus fixed costs per step and per
layer.  Those fractions are fitted on measured serving points, so a fitted value above what the kernels can
reach on the hardware would mean the parameter is absorbing something else.  This benchmark measures the
ceilings directly, on the GPU it runs on, with the shapes of the models in the data:

* HBM: a device-to-device copy (bytes read plus written);
* decode GEMMs: a token batch of 1-256 against a stack of weight matrices many times L2 (Llama-3.1-70B's
  layer whole and as TP-8 shards), replayed as a CUDA graph, as weight bytes streamed per second;
* prefill GEMMs: 8,192 tokens against the same shapes, bf16 (and fp8 through ``torch._scaled_mm``), as FLOP/s;
* attention: causal flash attention over 2k-8k token prompts (GQA 64/8 heads), as FLOP/s; decode attention
  (one query token per sequence over a contiguous KV cache) as KV bytes per second;
* a whole decode step of a Llama-3.1-8B-shaped model (random bf16 weights, 32 layers) replayed as a CUDA
  graph, against its weight-plus-KV bytes at the measured read rate (the fastest decode GEMM's): what is left
  over per layer is the kernels' own floor, to set beside the fitted ``layer_us`` (an engine's whole per-layer
  cost).

PyTorch's kernels are not an engine's (no fused norms, no paged cache), so the figures are ceilings and floors
to read the fit against, not replacements for it.  Nothing here is asserted; it needs a CUDA GPU::

    python benchmarks/gpu_kernels.py --json kernels.json                      # on the GPU machine
    python benchmarks/gpu_kernels.py --compare kernels.json --hardware h200-sxm-141gb   # anywhere

The second form reads the measured rates, divides them by the hardware profile's datasheet peaks and prints them
beside the fitted serving parameters (``autotune/serving/calibrated.py``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

# Llama-3.1-70B with TP 8: per-GPU shards of the four GEMMs of a layer (hidden 8192, 64 query and 8 KV heads of
# 128, FFN 28672): QKV 8192 -> (64+2*8)*128/8, O 1024 -> 8192, gate+up 8192 -> 2*28672/8, down 3584 -> 8192.
SHARDS_70B_TP8 = ((8192, 1280), (1024, 8192), (8192, 7168), (3584, 8192))
# unsharded 70B layer (TP 1): the large-GEMM regime of prefill
SHARDS_70B_TP1 = ((8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192))
# (tokens, prompts) of prefill attention and (context, sequences) of decode attention
ATTENTION_PREFILL = ((2048, 4), (4096, 2), (8192, 1))
ATTENTION_DECODE = ((1024, 128), (4096, 64), (8192, 32))
DEVICE = "cuda"  # a dry run of the shapes on the CPU sets "cpu"
LLAMA_8B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ffn": 14336,
            "vocab": 128256}


def _timer(torch):
    def time_s(fn, *, warmup: int = 10, repeats: int = 30) -> float:
        """Median seconds of one call of ``fn`` over ``repeats`` timed calls (CUDA events)."""
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        times.sort()
        return times[len(times) // 2]
    return time_s


def measure_copy(torch, time_s, gib: float = 4.0) -> dict:
    n = int(gib * 2**30) // 2
    a = torch.empty(n, dtype=torch.bfloat16, device=DEVICE)
    b = torch.empty_like(a)
    t = time_s(lambda: b.copy_(a))
    return {"bytes": 2 * 2 * n, "time_s": t, "bytes_per_s": 2 * 2 * n / t}


def _weight_stack(torch, shapes, total_gib: float):
    """Distinct weight matrices, layer after layer, until they are many times the L2 cache."""
    per_layer = sum(k * n for k, n in shapes) * 2
    layers = max(1, int(total_gib * 2**30 // per_layer))
    return [[torch.randn(k, n, dtype=torch.bfloat16, device=DEVICE) * 0.02 for k, n in shapes]
            for _ in range(layers)], layers * per_layer


def _graphed(torch, fn):
    """``fn`` captured as a CUDA graph (after warm-up on a side stream): its replay has no launch gaps, as in
    the engines, which replay their decode steps as graphs."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def measure_decode_gemm(torch, time_s, batches=(1, 8, 32, 64, 128, 256)) -> list[dict]:
    out = []
    for label, shapes in (("70B TP8 shards", SHARDS_70B_TP8), ("70B TP1", SHARDS_70B_TP1)):
        stack, weight_bytes = _weight_stack(torch, shapes, 6.0)
        for m in batches:
            xs = {k: torch.randn(m, k, dtype=torch.bfloat16, device=DEVICE) for k, _ in shapes}

            def run():
                for layer in stack:
                    for w in layer:
                        xs[w.shape[0]] @ w
            graph = _graphed(torch, run)
            t = time_s(graph.replay)
            out.append({"shapes": label, "tokens": m, "weight_bytes": weight_bytes, "time_s": t,
                        "weight_bytes_per_s": weight_bytes / t, "flop_per_s": m * weight_bytes / t})
    return out


def measure_prefill_gemm(torch, time_s, tokens: int = 8192) -> list[dict]:
    out = []
    for label, shapes in (("70B TP8 shards", SHARDS_70B_TP8), ("70B TP1", SHARDS_70B_TP1)):
        ws = [torch.randn(k, n, dtype=torch.bfloat16, device=DEVICE) * 0.02 for k, n in shapes]
        xs = [torch.randn(tokens, k, dtype=torch.bfloat16, device=DEVICE) for k, _ in shapes]
        flops = sum(2 * tokens * k * n for k, n in shapes)
        t = time_s(lambda: [x @ w for x, w in zip(xs, ws)])
        out.append({"shapes": label, "dtype": "bf16", "tokens": tokens, "time_s": t, "flop_per_s": flops / t})
        if hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
            try:
                w8 = [w.to(torch.float8_e4m3fn).t().contiguous().t() for w in ws]  # column-major second operand
                x8 = [x.to(torch.float8_e4m3fn) for x in xs]
                one = torch.ones((), dtype=torch.float32, device=DEVICE)

                def run8():
                    for x, w in zip(x8, w8):
                        torch._scaled_mm(x, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                t8 = time_s(run8)
                out.append({"shapes": label, "dtype": "fp8", "tokens": tokens, "time_s": t8, "flop_per_s": flops / t8})
            except (RuntimeError, TypeError) as error:  # an fp8 GEMM this build or GPU lacks
                out.append({"shapes": label, "dtype": "fp8", "error": str(error).splitlines()[0][:200]})
    return out


def measure_attention(torch, time_s) -> dict:
    import torch.nn.functional as F

    heads, kv_heads, d = 64, 8, 128
    prefill = []
    for seq, batch in ATTENTION_PREFILL:
        q = torch.randn(batch, heads, seq, d, dtype=torch.bfloat16, device=DEVICE)
        k = torch.randn(batch, kv_heads, seq, d, dtype=torch.bfloat16, device=DEVICE)
        v = torch.randn_like(k)
        t = time_s(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
        flops = 4 * batch * heads * seq * seq * d / 2  # QK^T and PV, causal half
        prefill.append({"seq": seq, "batch": batch, "time_s": t, "flop_per_s": flops / t})
    decode = []
    for ctx, batch in ATTENTION_DECODE:
        q = torch.randn(batch, heads // 8, 1, d, dtype=torch.bfloat16, device=DEVICE)  # one TP-8 shard: 8 q, 1 kv
        k = torch.randn(batch, 1, ctx, d, dtype=torch.bfloat16, device=DEVICE)
        v = torch.randn_like(k)
        layers = 16  # distinct caches so the reads come from HBM, not L2
        ks = [k.clone() for _ in range(layers)]
        vs = [v.clone() for _ in range(layers)]
        t = time_s(lambda: [F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True) for kk, vv in zip(ks, vs)])
        kv_bytes = layers * 2 * k.numel() * 2
        decode.append({"ctx": ctx, "batch": batch, "time_s": t, "kv_bytes_per_s": kv_bytes / t})
    return {"prefill": prefill, "decode": decode}


def _decode_step(torch, layers, head, caches, x0):
    """The step function: per layer RMSNorm, QKV, the new token's K/V into the cache, GQA attention over it, O,
    RMSNorm, gate/up, SiLU, down; then the LM head."""
    import torch.nn.functional as F

    c = LLAMA_8B
    h, hd, nq, nkv = c["hidden"], c["head_dim"], c["heads"], c["kv_heads"]
    b = x0.shape[0]

    def step():
        x = x0
        for layer, (kc, vc) in zip(layers, caches):
            y = F.rms_norm(x, (h,), layer["n1"])
            q, k, v = (y @ layer["qkv"]).split([nq * hd, nkv * hd, nkv * hd], dim=-1)
            q = q.view(b, nq, 1, hd)
            kc[:, :, -1, :] = k.view(b, nkv, hd)  # the new token's K and V into the cache
            vc[:, :, -1, :] = v.view(b, nkv, hd)
            a = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True).reshape(b, nq * hd)
            x = x + a @ layer["o"]
            y = F.rms_norm(x, (h,), layer["n2"])
            g, u = (y @ layer["gu"]).chunk(2, dim=-1)
            x = x + (F.silu(g) * u) @ layer["down"]
        return x @ head
    return step


def measure_decode_step(torch, time_s, batches=(1, 16, 64), ctx: int = 1024) -> list[dict]:
    """One decode step of a Llama-3.1-8B-shaped model, captured as a CUDA graph (no launch overhead)."""
    c = LLAMA_8B
    h, hd, nq, nkv, f = c["hidden"], c["head_dim"], c["heads"], c["kv_heads"], c["ffn"]
    layers = [{"qkv": torch.randn(h, (nq + 2 * nkv) * hd, dtype=torch.bfloat16, device=DEVICE) * 0.02,
               "o": torch.randn(nq * hd, h, dtype=torch.bfloat16, device=DEVICE) * 0.02,
               "gu": torch.randn(h, 2 * f, dtype=torch.bfloat16, device=DEVICE) * 0.02,
               "down": torch.randn(f, h, dtype=torch.bfloat16, device=DEVICE) * 0.02,
               "n1": torch.ones(h, dtype=torch.bfloat16, device=DEVICE),
               "n2": torch.ones(h, dtype=torch.bfloat16, device=DEVICE)} for _ in range(c["layers"])]
    head = torch.randn(h, c["vocab"], dtype=torch.bfloat16, device=DEVICE) * 0.02
    weight_bytes = 2 * (sum(w.numel() for layer in layers for w in layer.values()) + head.numel())
    out = []
    for b in batches:
        caches = [(torch.randn(b, nkv, ctx, hd, dtype=torch.bfloat16, device=DEVICE),
                   torch.randn(b, nkv, ctx, hd, dtype=torch.bfloat16, device=DEVICE)) for _ in layers]
        x0 = torch.randn(b, h, dtype=torch.bfloat16, device=DEVICE)
        graph = _graphed(torch, _decode_step(torch, layers, head, caches, x0))
        t = time_s(graph.replay)
        kv_bytes = sum(2 * kc.numel() * 2 for kc, _ in caches)
        out.append({"batch": b, "ctx": ctx, "layers": c["layers"], "time_s": t, "weight_bytes": weight_bytes,
                    "kv_bytes": kv_bytes})
        torch.cuda.empty_cache()
    return out


def _spin_up(torch, seconds: float = 3.0) -> None:
    """Large matmuls for a few seconds before anything is timed: an idle GPU sits at low clocks (345 MHz on an
    idle H200) and the first measurements would otherwise catch it ramping up."""
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=DEVICE)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def measure() -> dict:
    try:
        import torch
    except ImportError:
        raise SystemExit("gpu_kernels.py measures a CUDA GPU with PyTorch, which is not installed here; "
                         "use --compare FILE to read a measurement") from None
    if not torch.cuda.is_available():
        raise SystemExit("gpu_kernels.py measures a CUDA GPU, and torch sees none; use --compare FILE elsewhere")
    time_s = _timer(torch)
    torch.backends.cuda.matmul.allow_tf32 = False
    _spin_up(torch)
    started = time.time()
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
              "python": platform.python_version(), "measured_at": time.strftime("%Y-%m-%d")}
    for name, fn in zip(MEASUREMENTS, (measure_copy, measure_decode_gemm, measure_prefill_gemm, measure_attention,
                                       measure_decode_step)):
        result[name] = fn(torch, time_s)
        torch.cuda.empty_cache()
        print(f"{name}: done ({time.time() - started:.0f} s)", file=sys.stderr)
    return result


def _same_gpu(measured: str, hw) -> bool:
    """Whether the GPU name PyTorch reported (``NVIDIA H200``) is the one the profile describes: its model token
    (H200, H100, B200, ...) appears in the profile's name or description."""
    tokens = [t.lower() for t in measured.replace("-", " ").split() if any(c.isdigit() for c in t)]
    text = f"{hw.name} {hw.description}".lower()
    return bool(tokens) and tokens[0] in text


def compare(result: dict, hardware: str) -> list[str]:
    """Lines that set the measured rates, as fractions of the profile's datasheet peaks, beside the fit."""
    from autotune.inputs.hardware import load_hardware
    from autotune.serving.arch import gpu_scalars
    from autotune.serving.calibrated import CURRENT

    hw = load_hardware(hardware)
    hbm = hw.memory_bandwidth_gb_per_s * 1e9
    bf16, fp8 = hw.peak_tflops["bf16"] * 1e12, hw.peak_tflops.get("fp8", 0.0) * 1e12
    fit = {e: CURRENT[e] for e in ("vllm", "sglang", "trtllm")}
    ceiling = gpu_scalars(hw)["gemm_ceiling"]

    def fitted(name):
        values = {e: round(float(getattr(p, name)), 3) for e, p in fit.items()}
        if len(set(values.values())) == 1:
            return f"{name} {next(iter(values.values())):g}"
        return f"{name} " + ", ".join(f"{e} {v:g}" for e, v in values.items())

    if not _same_gpu(result["gpu"], hw):
        lines_note = [f"note: the measurement is of {result['gpu']}, but {hw.name} describes "
                      f"{hw.description or 'another GPU'}: the fractions below divide one by the other's peaks", ""]
    else:
        lines_note = []
    lines = lines_note + [f"{result['gpu']} (torch {result['torch']}, CUDA {result['cuda']}, {result['measured_at']}) against "
             f"{hw.name}: HBM {hbm / 1e12:.2f} TB/s, bf16 {bf16 / 1e12:.0f} TFLOP/s, fp8 {fp8 / 1e12:.0f} TFLOP/s",
             "", "| what | measured | of the datasheet peak | fitted |",
             "| --- | --- | --- | --- |"]
    copy = result["copy"]["bytes_per_s"]
    lines.append(f"| HBM copy (read + write) | {copy / 1e12:.2f} TB/s | {copy / hbm:.2f} | |")
    for row in result["decode_gemm"]:
        rate = row["weight_bytes_per_s"]
        lines.append(f"| decode GEMM (CUDA graph), {row['shapes']}, {row['tokens']} tokens | {rate / 1e12:.2f} "
                     f"TB/s of weights | {rate / hbm:.2f} | {fitted('weight_bandwidth')} |")
    for row in result["prefill_gemm"]:
        if "error" in row:
            lines.append(f"| prefill GEMM {row['dtype']}, {row['shapes']} | not run: {row['error']} | | |")
            continue
        peak = bf16 if row["dtype"] == "bf16" else fp8
        share = f"{row['flop_per_s'] / peak:.2f}" if peak > 0 else f"(the profile has no {row['dtype']} peak)"
        lines.append(f"| prefill GEMM {row['dtype']}, {row['shapes']}, {row['tokens']} tokens | "
                     f"{row['flop_per_s'] / 1e12:.0f} TFLOP/s | {share} | {fitted('gemm')} "
                     f"of the ceiling {ceiling:g} (reference_efficiency.gemm) |")
    for row in result["attention"]["prefill"]:
        lines.append(f"| prefill attention (causal, GQA 64/8), {row['seq']} tokens x {row['batch']} | "
                     f"{row['flop_per_s'] / 1e12:.0f} TFLOP/s | {row['flop_per_s'] / bf16:.2f} | "
                     f"{fitted('attention')} |")
    for row in result["attention"]["decode"]:
        lines.append(f"| decode attention, ctx {row['ctx']} x {row['batch']} sequences | "
                     f"{row['kv_bytes_per_s'] / 1e12:.2f} TB/s of KV | {row['kv_bytes_per_s'] / hbm:.2f} | "
                     f"{fitted('kv_bandwidth')} |")
    # the fastest a weight stream went (a one-token GEMM over a whole layer's matrices): HBM read, no writes
    read = max((r["weight_bytes_per_s"] for r in result["decode_gemm"]), default=copy)
    for row in result["decode_step"]:
        streamed_s = (row["weight_bytes"] + row["kv_bytes"]) / read
        floor_us = (row["time_s"] - streamed_s) / row["layers"] * 1e6
        lines.append(f"| Llama-3.1-8B decode step (CUDA graph), batch {row['batch']}, ctx {row['ctx']} | "
                     f"{row['time_s'] * 1e3:.2f} ms | bytes at the read rate {streamed_s * 1e3:.2f} ms; "
                     f"{floor_us:.0f} us a layer beyond | {fitted('layer_us')} |")
    return lines


def _read_measurement(parser: argparse.ArgumentParser, path: Path) -> dict:
    try:
        result = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as error:
        parser.error(f"--compare {path}: cannot be read ({error.__class__.__name__}: {error.strerror or error})")
    except json.JSONDecodeError as error:
        parser.error(f"--compare {path}: is not JSON ({error})")
    missing = [k for k in ("gpu", "torch", "cuda", "measured_at", *MEASUREMENTS) if not isinstance(result, dict)
               or k not in result]
    if missing:
        parser.error(f"--compare {path}: is not a measurement of this script (no {', '.join(missing)}); write one "
                     "with --json on a GPU machine")
    return result


MEASUREMENTS = ("copy", "decode_gemm", "prefill_gemm", "attention", "decode_step")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the measured rates to this file (it must not exist)")
    parser.add_argument("--compare", type=Path, help="read measured rates from this file instead of measuring")
    parser.add_argument("--hardware", default=None, help="hardware profile to divide by (with --compare)")
    args = parser.parse_args(argv)
    if args.compare is None and args.hardware is not None:
        parser.error("--hardware goes with --compare FILE (a measurement is divided by the profile's peaks)")
    if args.compare is not None:
        if args.hardware is None:
            parser.error("--compare needs --hardware NAME (the profile of the GPU that was measured)")
        result = _read_measurement(parser, args.compare)
        try:
            from autotune.errors import InputError
        except ImportError:
            parser.error("--compare reads autotune's profiles and fit: install it first (pip install -e .)")

        try:
            lines = compare(result, args.hardware)
        except InputError as error:
            parser.error(f"--hardware {args.hardware}: {error}")
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
            parser.error(f"--compare {args.compare}: a measurement is malformed ({error.__class__.__name__}: {error})")
        print("\n".join(lines))
        return 0
    if args.json is not None and args.json.exists():  # before minutes of measuring, not after
        parser.error(f"{args.json} exists; give another --json path")
    result = measure()
    text = json.dumps(result, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
