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
    # 8 GiB read and written in 2.02 ms: 4.26 TB/s of the datasheet's 4.8
    assert "| HBM copy (read + write) | 4.26 TB/s | 0.89 | |" in text
    assert "| prefill GEMM bf16, 70B TP8 shards, 8192 tokens | 754 TFLOP/s | 0.76 |" in text
    assert "of the ceiling 0.803" in text  # the H200 profile's MAMF ceiling, beside the fitted share


def test_the_measured_copy_rate_is_the_streaming_bound_of_the_fit():
    """The bound the fit keeps weight and KV streaming under is the copy rate this measurement gives."""
    from autotune.serving.estimate import SERVING_PARAM_BOUNDS

    result = json.loads(RESULT.read_text())
    copy_fraction = result["copy"]["bytes_per_s"] / 4800e9
    assert SERVING_PARAM_BOUNDS["kv_bandwidth"][1] == pytest.approx(copy_fraction, abs=0.005)


def test_compare_needs_the_hardware_that_was_measured(capsys):
    with pytest.raises(SystemExit) as raised:
        _module().main(["--compare", str(RESULT)])
    assert raised.value.code == 2
    assert "--hardware" in capsys.readouterr().err
