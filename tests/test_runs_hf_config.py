"""A measured-runs CSV may name a row's architecture with an ``hf_config`` cell (a config.json path,
relative to the CSV or absolute) instead of the architecture columns."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from autotune.errors import InputError
from autotune.inputs.modelspec import load_model
from autotune.training.runs import MeasuredRun, read_runs

HF_DIR = Path(__file__).parent / "data" / "hf_configs"
# DeepSeek-V3's published pre-training layout (arXiv 2412.19437 §3.2, §4.2): 2048 H800, PP16, EP64, ZeRO-1.
ROW = {"id": "DSV3-PRETRAIN", "source_group": "DeepSeekV3", "source": "DeepSeek-V3 technical report arXiv 2412.19437",
       "model_name": "DeepSeek-V3", "seq_len": "4096", "gpu": "h800-sxm5-80gb", "n_gpus": "2048", "tp": "1",
       "pp": "16", "ep": "64", "zero": "1", "precision": "fp8", "global_batch": "15360",
       "measured_tokens_per_s_per_gpu": "1543"}


def write_csv(path: Path, rows: list[dict]) -> Path:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_relative_hf_config_replaces_the_architecture_columns(tmp_path):
    (tmp_path / "configs").mkdir()
    shutil.copy(HF_DIR / "DeepSeek-V3" / "config.json", tmp_path / "configs" / "dsv3.json")
    (tmp_path / "runs").mkdir()
    path = write_csv(tmp_path / "runs" / "runs.csv", [{**ROW, "hf_config": "../configs/dsv3.json"}])
    [run] = read_runs(path)
    assert isinstance(run, MeasuredRun), run
    reference = load_model("deepseek-v3")
    assert run.model.name == "DeepSeek-V3" and run.model.mla == reference.mla and run.model.moe == reference.moe
    assert run.model.n_params == reference.n_params and run.model.mtp_layers == 1
    assert run.known["ep"] == 64 and run.n_gpus == 2048


def test_absolute_hf_config_and_rows_with_columns_mix(tmp_path):
    absolute = str((HF_DIR / "Qwen3-30B-A3B" / "config.json").resolve())
    by_columns = {**ROW, "id": "DENSE", "model_name": "tiny", "n_layers": "2", "hidden_size": "64",
                  "ffn_hidden_size": "256", "n_heads": "4", "vocab_size": "1000", "hf_config": ""}
    path = write_csv(tmp_path / "runs.csv", [{**ROW, "id": "QWEN", "model_name": "", "hf_config": absolute}, by_columns])
    qwen, dense = read_runs(path)
    assert qwen.model.name == "qwen3-30b-a3b" and qwen.model.moe.n_experts == 128
    assert dense.model.n_layers == 2 and dense.model.mla is None


def test_without_hf_config_the_architecture_columns_are_still_required(tmp_path):
    path = write_csv(tmp_path / "runs.csv", [ROW])
    with pytest.raises(InputError, match="n_layers"):
        read_runs(path)


def test_an_unreadable_hf_config_names_the_row_and_the_file(tmp_path):
    path = write_csv(tmp_path / "runs.csv", [{**ROW, "hf_config": "missing/config.json"}])
    with pytest.raises(InputError) as err:
        read_runs(path)
    message = str(err.value)
    assert "DSV3-PRETRAIN" in message and "missing/config.json" in message and "hf_config" in message
