"""benchmarks/gpu_kernels.py: the bundled H200 measurement reads back against the profile and the fit (no GPU)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "gpu_kernels_h200.json"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_kernels", ROOT / "benchmarks" / "gpu_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_h200_measurement_reads_as_fractions_of_its_profiles_peaks():
    lines = _module().compare(json.loads(RESULT.read_text()), "h200-sxm-141gb")
    text = "\n".join(lines)
    # 8 GiB read and written in 2.02 ms: 4.25 TB/s of the datasheet's 4.8
    assert "| HBM copy (read + write) | 4.25 TB/s | 0.88 | |" in text
    assert "| prefill GEMM bf16, 70B TP8 shards, 8192 tokens | 684 TFLOP/s | 0.69 |" in text
    assert "of the ceiling 0.803" in text  # the H200 profile's MAMF ceiling, beside the fitted share


def test_the_measured_read_rate_is_the_streaming_bound_of_the_fit():
    """The bound the fit keeps weight and KV streaming under is the rate the measured one-token GEMM streams a
    whole 70B layer's weights at (a read stream: above the copy rate, which also writes)."""
    from autotune.serving.estimate import SERVING_PARAM_BOUNDS

    result = json.loads(RESULT.read_text())
    read = [r["weight_bytes_per_s"] / 4800e9 for r in result["decode_gemm"] if r["shapes"] == "70B TP1"
            and r["tokens"] == 1]
    copy = result["copy"]["bytes_per_s"] / 4800e9
    assert read[0] > copy
    assert SERVING_PARAM_BOUNDS["kv_bandwidth"][1] == SERVING_PARAM_BOUNDS["weight_bandwidth"][1]
    assert SERVING_PARAM_BOUNDS["kv_bandwidth"][1] == pytest.approx(read[0], abs=0.005)


def test_compare_needs_a_hardware_profile(capsys):
    with pytest.raises(SystemExit) as raised:
        _module().main(["--compare", str(RESULT)])
    assert raised.value.code == 2
    assert "--hardware" in capsys.readouterr().err
