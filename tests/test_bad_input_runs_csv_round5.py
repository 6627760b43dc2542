"""Serving- and training-runs CSVs a bad-input sweep (round 5) found crashing or read silently: a header with
spaces around its names, a mixture of experts without its top-k, a KV dtype autotune has no model for.

Each case runs as a person would type it, through typer's CliRunner: a file error is one line naming the file,
the row or column and the value, exit status 2, no traceback; a well-formed row that cannot be predicted is
skipped with its reason (and a file of nothing else is an error that gives it)."""

from __future__ import annotations

import json

import pytest

from tests.test_bad_input import ROOT, SERVING_CSV, assert_user_error, csv_rows, invoke, write_csv

HEADER = ("id,source_group,model_name,n_layers,hidden_size,ffn_hidden_size,n_heads,n_kv_heads,vocab_size,gpu,n_gpus,"
          "tp,pp,weight_precision,kv_cache_dtype,input_len,output_len,scenario,output_tokens_per_s_per_gpu,engine,"
          "engine_version,moe_experts,moe_topk,ep,replicas,attention_dp").split(",")
ROW = ("r1,g,Llama 3.1 70B,80,8192,28672,64,8,128256,h100-sxm5-80gb,8,8,1,fp8,fp8,1024,128,offline,400,vllm,0.6.0,,,"
       "1,1,1").split(",")
BUNDLED_TRAINING = ROOT / "autotune" / "data" / "training_runs.csv"


def serving_csv(path, changes: dict | None = None, *, header: list[str] = HEADER, second: bool = False):
    """The one-row serving file at ``path`` with ``changes`` made to its row (and a second, good row when
    ``second``), under ``header`` (the column names, padded or not)."""
    row = dict(zip(HEADER, ROW))
    rows = [{**row, **(changes or {})}] + ([{**row, "id": "r2"}] if second else [])
    lines = [",".join(header)] + [",".join(r[c] for c in HEADER) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def validate_json(path) -> dict:
    result = invoke("validate", path, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- 1. a header with spaces around its names ---------------------------------------------------------------------

@pytest.mark.parametrize("header", [[" " + HEADER[0], *HEADER[1:]], [f" {c} " for c in HEADER]],
                         ids=["leading-space", "padded"])
def test_a_header_with_spaces_around_names_reads_as_without(tmp_path, header):
    expected = validate_json(serving_csv(tmp_path / "plain.csv"))
    padded = serving_csv(tmp_path / "runs.csv", header=header)
    assert validate_json(padded) == expected
    result = invoke("calibrate", padded, "--out", tmp_path / "c.yaml")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "c.yaml").exists()


def test_the_dataset_column_is_read_under_a_padded_header(tmp_path):
    # the rate rows' request counts come from the dataset column: a padded header must not lose them
    rows = csv_rows(SERVING_CSV)
    header = list(rows[0])
    plain = validate_json(SERVING_CSV)
    padded = write_csv(tmp_path / "padded.csv", [{f" {c} ": v for c, v in r.items()} for r in rows],
                       header=[f" {c} " for c in header])
    assert validate_json(padded) == plain
    without = write_csv(tmp_path / "without.csv", rows, header=[c for c in header if c != "dataset"])
    assert validate_json(without) != plain  # so the comparison above would see a dataset column read as empty


# --- 2. a mixture of experts without its top-k ------------------------------------------------------------------

def test_a_serving_row_with_experts_and_no_topk_is_skipped_naming_moe_topk(tmp_path):
    assert_user_error(invoke("validate", serving_csv(tmp_path / "runs.csv", {"moe_experts": "8"})),
                      "runs.csv", "r1", "moe_topk", "moe_experts=8")
    result = invoke("validate", serving_csv(tmp_path / "runs.csv", {"moe_experts": "8"}, second=True))
    assert result.exit_code == 0, result.output
    assert "skipped r1: architecture not stated: moe_topk (the row has moe_experts=8)" in result.stderr
    result = invoke("validate", serving_csv(tmp_path / "runs.csv", {"moe_experts": "8", "moe_topk": "2"}))
    assert result.exit_code == 0, result.output


def test_a_training_row_with_experts_and_no_topk_is_skipped_not_top_1(tmp_path):
    rows = csv_rows(BUNDLED_TRAINING)[:3]
    rows[0]["moe_experts"], rows[0]["moe_topk"] = "8", ""
    rid = rows[0]["id"]
    assert_user_error(invoke("validate", write_csv(tmp_path / "one.csv", rows[:1])),
                      "one.csv", rid, "moe_topk", "moe_experts=8")
    result = invoke("validate", write_csv(tmp_path / "runs.csv", rows))
    assert result.exit_code == 0, result.output
    assert f"skipped {rid}: no value for moe_topk (the row has moe_experts=8)" in result.stderr
    rows[0]["moe_topk"] = "2"
    result = invoke("validate", write_csv(tmp_path / "runs.csv", rows))
    assert result.exit_code == 0, result.output
    assert "skipped" not in result.stderr


# --- 3. a KV dtype the estimate has no model for ------------------------------------------------------------------

@pytest.mark.parametrize("value", ["int2", "int8", "fp4", "e5m2"])
def test_an_unknown_kv_cache_dtype_is_refused_naming_the_column(tmp_path, value):
    assert_user_error(invoke("validate", serving_csv(tmp_path / "runs.csv", {"kv_cache_dtype": value})),
                      "runs.csv", "r1", "kv_cache_dtype", repr(value), "bf16, fp16, fp8 or auto")
    result = invoke("validate", serving_csv(tmp_path / "runs.csv", {"kv_cache_dtype": value}, second=True))
    assert result.exit_code == 0, result.output
    assert "skipped r1: kv_cache_dtype must be bf16, fp16, fp8 or auto" in result.stderr


@pytest.mark.parametrize("value, kv", [("fp8", ["fp8"]), ("FP8_e4m3", ["fp8"]), ("float8_e4m3fn", ["fp8"]),
                                       ("fp16", ["bf16"]), ("half", ["bf16"]), ("auto", ["bf16"]),
                                       ("bf16", ["bf16"]), ("", ["bf16", "fp8"])])
def test_the_known_kv_cache_dtypes_still_read(tmp_path, value, kv):
    report = validate_json(serving_csv(tmp_path / "runs.csv", {"kv_cache_dtype": value}))
    assert report["skipped"] == [] and len(report["rows"]) == 1
    assert report["rows"][0]["kv_unknown"] is (len(kv) > 1)


# --- 4. the engine names still read ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["vllm", "SGLang", "trtllm", "TensorRT-LLM", "trt-llm"])
def test_the_known_engines_and_their_aliases_still_read(tmp_path, value):
    # a release each of them has had (SGLang went from 0.4 to 0.5; it had no 0.6)
    report = validate_json(serving_csv(tmp_path / "runs.csv", {"engine": value, "engine_version": "0.5.0"}))
    assert report["skipped"] == [] and len(report["rows"]) == 1
