"""The bundled hardware profiles (profiles/hardware/*.yaml) and the loader's errors for bad profiles."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from autotune.errors import InputError
from autotune.inputs.hardware import EFFICIENCY_BOUNDS, hardware_names, load_hardware
from autotune.inputs.resources import bundled_dir

REQUIRED_PROFILES = (
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "h100-sxm5-80gb",
    "h200-sxm-141gb",
    "b200-sxm-180gb",
    "mi300x-192gb",
    "l40s-48gb",
)

# Fields whose value must name a source (the key itself, or a dotted sub-key such as "intra_node.latency_us").
REQUIRED_SOURCES = (
    "peak_tflops",
    "memory_gib",
    "memory_bandwidth_gb_per_s",
    "intra_node",
    "inter_node",
    "tdp_w",
    "price_usd_per_gpu_hour",
)


def _raw(name: str) -> dict:
    return yaml.safe_load((bundled_dir("hardware") / f"{name}.yaml").read_text())


def _has_source(sources, key: str) -> bool:
    return key in sources or any(s.startswith(key + ".") for s in sources)


ALL_NAMES = hardware_names()


def test_every_required_profile_is_bundled():
    missing = sorted(set(REQUIRED_PROFILES) - set(ALL_NAMES))
    assert not missing, f"missing bundled hardware profiles: {missing}"


@pytest.mark.parametrize("name", ALL_NAMES)
def test_profile_loads_and_is_named_after_its_file(name):
    hw = load_hardware(name)
    assert hw.name == name
    assert hw.description
    assert "bf16" in hw.peak_tflops
    assert hw.gpus_per_node >= 1
    assert hw.average_power_w <= hw.tdp_w


@pytest.mark.parametrize("name", ALL_NAMES)
def test_profile_names_a_source_for_each_required_field(name):
    sources = load_hardware(name).sources
    missing = [key for key in REQUIRED_SOURCES if not _has_source(sources, key)]
    assert not missing, f"{name}: no source for {missing}"
    assert all(text.strip() for text in sources.values()), f"{name}: empty source text"


@pytest.mark.parametrize("name", ALL_NAMES)
def test_every_number_in_the_profile_has_a_source(name):
    raw = _raw(name)
    sources = raw["sources"]
    numeric = [key for key, value in raw.items() if key not in ("efficiency", "sources")
               and (isinstance(value, (int, float, dict)) and not isinstance(value, bool))]
    missing = [key for key in numeric if not _has_source(sources, key)]
    missing += [f"efficiency.{key}" for key in (raw.get("efficiency") or {}) if f"efficiency.{key}" not in sources]
    assert not missing, f"{name}: numbers without a source: {missing}"
    assert not [key for key in sources if key.split(".")[0] not in raw], f"{name}: source for a field not in the profile"


@pytest.mark.parametrize("name", ALL_NAMES)
def test_sources_cite_public_material_not_local_paths(name):
    for key, text in load_hardware(name).sources.items():
        checkout_parent = str(Path(__file__).resolve().parents[2])
        assert checkout_parent + "/" not in text and "shared/data" not in text, f"{name}: {key} cites a local path"
        assert not text.lstrip().startswith("/"), f"{name}: {key} cites an absolute path"


@pytest.mark.parametrize("name", ALL_NAMES)
def test_efficiency_values_set_in_a_profile_are_within_bounds(name):
    hw = load_hardware(name)
    for key in _raw(name).get("efficiency") or {}:
        low, high = EFFICIENCY_BOUNDS[key]
        assert low <= getattr(hw.efficiency, key) <= high


@pytest.mark.parametrize("name", [n for n in REQUIRED_PROFILES if n.startswith("a100")])
def test_a100_has_no_fp8(name):
    hw = load_hardware(name)
    assert not hw.supports("fp8")
    assert "fp8" not in hw.peak_tflops
    assert "fp8_gemm" not in (_raw(name).get("efficiency") or {})


BLACKWELL = ["b200-sxm-180gb", "b300-sxm-288gb", "gb200-nvl72", "gb300-nvl72", "rtx-pro-6000-blackwell"]


def test_only_blackwell_has_fp4_and_the_block_scaled_formats():
    # FP4 tensor cores and hardware block scaling (MXFP8, NVFP4, MXFP4) came with Blackwell; Hopper's
    # DeepSeek-style blockwise fp8 is plain fp8 scaled in software.
    for precision in ("fp4", "nvfp4", "mxfp4", "mxfp8"):
        assert [name for name in ALL_NAMES if load_hardware(name).supports(precision)] == BLACKWELL, precision
    for name in BLACKWELL:
        hw = load_hardware(name)
        assert hw.peak_tflops["mxfp8"] == hw.peak_tflops["fp8"]
        assert hw.peak_tflops["nvfp4"] == hw.peak_tflops["mxfp4"] == hw.peak_tflops["fp4"]


def test_h100_fp8_peak_is_twice_bf16():
    hw = load_hardware("h100-sxm5-80gb")
    assert hw.peak_tflops["fp8"] == 2 * hw.peak_tflops["bf16"]
    assert math.isclose(hw.peak_flops("fp8"), 2 * hw.peak_flops("bf16"))


def test_dense_not_sparse_peaks():
    # Datasheet sparse figures would double these; dense bf16 for H100 SXM is 1979/2 = 989.5 TFLOP/s.
    assert load_hardware("h100-sxm5-80gb").peak_tflops["bf16"] == 989.5
    assert load_hardware("a100-sxm4-80gb").peak_tflops["bf16"] == 312


def _write_h100_copy(tmp_path, **extra) -> str:
    data = _raw("h100-sxm5-80gb")
    data.update(extra)
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_profile_copy_written_to_a_path_loads(tmp_path):
    hw = load_hardware(_write_h100_copy(tmp_path))
    assert hw.peak_tflops == load_hardware("h100-sxm5-80gb").peak_tflops


def test_unknown_key_raises_input_error_listing_it(tmp_path):
    path = _write_h100_copy(tmp_path, memory_bandwith_gb_per_s=3350)
    with pytest.raises(InputError) as info:
        load_hardware(path)
    message = str(info.value)
    assert "memory_bandwith_gb_per_s" in message
    assert "unknown key" in message


def test_unknown_nested_key_raises_input_error_listing_it(tmp_path):
    data = _raw("h100-sxm5-80gb")
    data["efficiency"]["gemm_eff"] = 0.8
    path = tmp_path / "nested.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="efficiency.gemm_eff"):
        load_hardware(str(path))


def test_malformed_yaml_raises_input_error_naming_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\npeak_tflops: [989, \n  bf16: 1\n")
    with pytest.raises(InputError) as info:
        load_hardware(str(path))
    message = str(info.value)
    assert str(path) in message
    assert "malformed YAML" in message


def test_unknown_profile_name_lists_the_bundled_names():
    with pytest.raises(InputError) as info:
        load_hardware("no-such-gpu")
    message = str(info.value)
    assert "no-such-gpu" in message
    for name in REQUIRED_PROFILES:
        assert name in message


# --- one calibration method for every GPU --------------------------------------------------------------


def test_every_profile_is_calibrated_or_derived_the_documented_way():
    from autotune.training.calibration import (
        CALIBRATION_REFERENCES,
        SILICON_FAMILIES,
        derived_efficiency,
    )

    references = [load_hardware(n) for n in CALIBRATION_REFERENCES]
    for name in ALL_NAMES:
        hw = load_hardware(name)
        if hw.calibrated:
            # Fitted on its own runs or its silicon family's: the family shares the compute efficiencies.
            kin = [load_hardware(n) for n, f in SILICON_FAMILIES.items() if f == SILICON_FAMILIES.get(name)]
            assert kin, f"{name} is marked calibrated but has no silicon family with runs"
            for other in kin:
                for key in ("gemm", "attention", "cudnn_attention"):
                    assert getattr(hw.efficiency, key) == getattr(other.efficiency, key), (name, other.name, key)
        else:
            derived = derived_efficiency(hw.reference_efficiency, references, hw.supports("fp8"))
            for key, value in derived.items():
                assert getattr(hw.efficiency, key) == value, (name, key)


def test_uncalibrated_profiles_are_named_in_the_search_header():
    from autotune.inputs.hardware import Cluster
    from autotune.inputs.modelspec import load_model
    from autotune.inputs.workload import TrainWorkload
    from autotune.outputs.tables import search_header
    from autotune.training.problem import TrainingProblem
    from autotune.training.space import load_space

    def header(gpu):
        problem = TrainingProblem.build(load_model("llama3-8b"), Cluster(load_hardware(gpu), 8, 8),
                                        TrainWorkload(4096, 16), load_space(None))
        return search_header(problem)

    assert "b200-sxm-180gb is uncalibrated" in header("b200-sxm-180gb")
    assert "uncalibrated" not in header("h100-sxm5-80gb")
