"""Names in measured files and on the command line, as users spell them: engine cells (``NAME[@VERSION]``) read by one
parser in the silicon and serving-runs readers, and Hugging Face ids stored as the catalogue's id whatever spelling a
row uses.

Each case runs through typer's CliRunner (or the reader function): a cell that does not say which engine or release
a row ran is one line naming the file, the row, the column and the value, exit 2, no traceback.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from tests.test_bad_input import assert_user_error
from tests.test_bad_input_runs_csv_round5 import HEADER, ROW, serving_csv, validate_json
from tests.test_bad_input_silicon_cells import ROWS, _mutated

runner = CliRunner()


# --- engine cells: one parser for NAME[@VERSION] ----------------------------------------------------------------

@pytest.mark.parametrize("value, what", [("vllm@", "its version is empty"), ("@1.0", "its name is empty"),
                                         ("trtllm@1.0@x", "more than one @"), ("@", "its name is empty")])
def test_a_silicon_engine_cell_without_its_name_or_version_is_refused(tmp_path, value, what):
    path = _mutated(tmp_path, {"engine": value})
    result = runner.invoke(app, ["validate", str(path)])
    assert_user_error(result, str(path), "field 'engine'", "row 'bad' (line 4)", f"(engine={value!r})", what)


@pytest.mark.parametrize("value, what", [("vllm@", "its version is empty"), ("@0.6", "its name is empty")])
def test_a_serving_runs_engine_cell_without_its_name_or_version_is_refused(tmp_path, value, what):
    path = serving_csv(tmp_path / "runs.csv", {"engine": value, "engine_version": ""})
    result = runner.invoke(app, ["validate", str(path)])
    assert_user_error(result, str(path), "field 'engine'", "row 'r1'", f"(engine={value!r})", what)


@pytest.mark.parametrize("value", ["TensorRT-LLM@1.0", "trtllm@1.0.0rc2", "TRT-LLM@1.0"])
def test_a_serving_runs_engine_cell_with_its_release_reads_as_the_engine(tmp_path, value):
    """``TensorRT-LLM@1.0`` was read whole and skipped as an unknown engine; it is TensorRT-LLM, release 1.0."""
    plain = validate_json(serving_csv(tmp_path / "plain.csv", {"engine": "trtllm", "engine_version": "1.0"}))
    report = validate_json(serving_csv(tmp_path / "runs.csv", {"engine": value, "engine_version": ""}))
    assert report["skipped"] == [] and len(report["rows"]) == 1
    assert report["rows"] == plain["rows"]


def test_a_serving_runs_engine_release_in_both_columns_must_agree(tmp_path):
    same = validate_json(serving_csv(tmp_path / "same.csv", {"engine": "trtllm@1.0", "engine_version": "1.0.0"}))
    assert same["skipped"] == [] and len(same["rows"]) == 1
    path = serving_csv(tmp_path / "runs.csv", {"engine": "trtllm@1.0", "engine_version": "0.14.0"})
    result = runner.invoke(app, ["validate", str(path)])
    assert_user_error(result, str(path), "field 'engine'", "row 'r1'", "engine='trtllm@1.0'",
                      "engine_version='0.14.0'")


def test_a_silicon_engine_cell_with_its_release_still_reads():
    from autotune.serving.silicon import SiliconRow, parse_silicon_row

    base = next(r for r in ROWS if r["engine"] == "sglang" and r["duplicate_primary"] == "true")
    plain = parse_silicon_row(base)
    assert isinstance(plain, SiliconRow)
    for value in ("SGLang@0.5.6", " sglang @ 0.5.6 "):
        assert parse_silicon_row({**base, "engine": value}) == plain, value


# --- model ids: file URLs and a second revision ------------------------------------------------------------------

def test_models_show_of_a_file_url_says_it_is_not_fetched_and_gives_the_id():
    """It was read as the local path 'https:/huggingface.co/...' and reported missing."""
    url = "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json"
    result = runner.invoke(app, ["models", "show", url])
    assert_user_error(result, "field 'NAME'", "file URLs are not fetched", f"(model={url!r}",
                      "give the model's id, deepseek-ai/DeepSeek-V3,", "download its config.json")
    assert "https:/huggingface" not in result.stderr


def test_a_file_url_of_a_model_the_catalogue_does_not_list_says_to_download_its_config():
    url = "https://huggingface.co/someone/unlisted-model/resolve/v2/config.json"
    result = runner.invoke(app, ["models", "show", url])
    assert_user_error(result, "field 'NAME'", "file URLs are not fetched", "download the repository's config.json",
                      "someone/unlisted-model is not in profiles/catalogue/hf_models.yaml")


def test_a_local_file_url_is_told_to_give_the_path():
    """file:///… was told to download the config.json, which the user already has."""
    result = runner.invoke(app, ["models", "show", "file:///data/llama/config.json"])
    assert_user_error(result, "field 'NAME'", "give the path without file:// (/data/llama/config.json)")
    assert "download" not in result.stderr


def test_a_file_url_given_as_model_is_refused_under_its_flag():
    url = "https://huggingface.co/moonshotai/Kimi-K2.5/blob/v2/config.json"
    result = runner.invoke(app, ["predict", "--workload", "serve", "-m", url, "-H", "b200", "--gpus", "8", "-p", "tp=8",
                                 "--input-len", "1024", "--output-len", "1024"])
    assert_user_error(result, "field '--model'", "file URLs are not fetched",
                      "moonshotai/Kimi-K2.5 (or moonshotai/Kimi-K2.5@v2, that revision)")


@pytest.mark.parametrize("args, field", [
    (["models", "show"], "NAME"),
    (["predict", "--workload", "serve", "-H", "b200", "--gpus", "8", "-p", "tp=8", "--input-len", "1024",
      "--output-len", "1024", "-m"], "--model"),
])
@pytest.mark.parametrize("model, what", [("moonshotai/Kimi-K2.5@main@x", "more than one revision (@main@x)"),
                                         ("https://huggingface.co/moonshotai/Kimi-K2.5@a@b", "more than one revision"),
                                         ("moonshotai/Kimi-K2.5@", "revision after @ is empty")])
def test_a_model_id_with_two_revisions_or_an_empty_one_is_refused(args, field, model, what):
    """org/name@main@x was read as revision 'main@x' of org/name and planned without a word."""
    result = runner.invoke(app, [*args, model])
    assert_user_error(result, f"field '{field}'", f"(model={model!r})", what)


def test_a_silicon_id_cell_with_two_revisions_is_refused(tmp_path):
    base = {**ROWS[2], "hf_model_id": "deepseek-ai/DeepSeek-V3@main@x"}
    path = _mutated(tmp_path, {}, base)
    result = runner.invoke(app, ["validate", str(path)])
    assert_user_error(result, str(path), "field 'hf_model_id'", "row 'bad' (line 4)",
                      "(hf_model_id='deepseek-ai/DeepSeek-V3@main@x')", "more than one revision")


def test_a_serving_runs_id_cell_with_two_revisions_is_refused(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(f"{','.join(HEADER)},hf_model_id\n{','.join(ROW)},nvidia/Llama-3.3-70B-Instruct-FP8@main@x\n",
                    encoding="utf-8")
    result = runner.invoke(app, ["validate", str(path)])
    assert_user_error(result, str(path), "field 'hf_model_id'", "row 'r1'", "more than one revision")


def test_the_catalogue_does_not_read_a_second_revision():
    from autotune.inputs.catalogue import hf_id_parts, lookup_hf_id

    assert lookup_hf_id("moonshotai/Kimi-K2.5@main").hf_id == "moonshotai/Kimi-K2.5"
    assert lookup_hf_id("moonshotai/Kimi-K2.5@main@x") is None
    assert hf_id_parts("moonshotai/Kimi-K2.5@main@x") == ("moonshotai/Kimi-K2.5@main@x", None)


# --- one model, one id: the catalogue's, whatever the row's spelling --------------------------------------------

KIMI_SPELLINGS = ["moonshotai/Kimi-K2.5", "https://huggingface.co/moonshotai/Kimi-K2.5/tree/main",
                  "MOONSHOTAI/kimi-k2.5@main", "hf://moonshotai/Kimi-K2.5@54383e83fa343a1331754112fb9e3410c55efa2f"]


def _kimi_rows(distinct: bool) -> list[dict]:
    """The Kimi-K2.5 row of tests/test_unseen_models.py once per spelling of its id: the same measurement (a copy
    of one benchmark), or each its own (``distinct``)."""
    from tests.test_unseen_models import KIMI

    return [{**KIMI, "id": f"s{k}", "hf_model_id": spelling,
             "ttft_ms": str(float(KIMI["ttft_ms"]) + (k if distinct else 0))}
            for k, spelling in enumerate(KIMI_SPELLINGS)]


def test_a_silicon_row_keeps_the_catalogues_id_whatever_its_spelling(tmp_path):
    from tests.test_unseen_models import _validate

    doc = _validate(tmp_path, _kimi_rows(distinct=True))
    assert doc["skipped"] == []
    assert [r["hf_model_id"] for r in doc["rows"]] == ["moonshotai/Kimi-K2.5"] * len(KIMI_SPELLINGS)


def test_copies_of_one_measurement_under_other_spellings_of_the_id_are_one_measurement(tmp_path):
    """The rounded-copy check grouped rows by the cell as written: a copy whose id was the repository's address or
    another case counted as a second measurement of another model."""
    from tests.test_unseen_models import _validate

    doc = _validate(tmp_path, _kimi_rows(distinct=False))
    assert [r["id"] for r in doc["rows"]] == ["s0"]
    assert sorted(s["id"] for s in doc["skipped"]) == ["s1", "s2", "s3"]
    assert all("a rounded copy of row s0's measurement" in s["reason"] for s in doc["skipped"])


def test_validate_shows_the_models_name_not_its_revision(tmp_path):
    """A row whose id was written .../tree/main was shown as the model 'main'."""
    from tests.test_unseen_models import _write

    path = _write(tmp_path, _kimi_rows(distinct=True)[1:2])
    result = runner.invoke(app, ["validate", str(path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    line = next(line for line in result.stdout.splitlines() if "trtllm agg" in line)
    assert "Kimi-K2.5" in line and "main" not in line


def test_leave_one_model_out_sees_one_model_under_two_spellings(tmp_path):
    """Rows of one model in two spellings were two models to hold out, each refitted on the other's rows."""
    from tests.test_unseen_models import _write

    path = _write(tmp_path, _kimi_rows(distinct=True)[:2])
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "c.yaml"), "--leave-one-out"])
    assert_user_error(result, "field '--leave-one-out'", "(model='moonshotai/Kimi-K2.5')")


def test_the_canonical_id_of_an_unlisted_model_is_its_plain_id_in_lower_case():
    from autotune.inputs.catalogue import canonical_hf_id

    assert canonical_hf_id("https://huggingface.co/moonshotai/kimi-k2.5/tree/v2") == "moonshotai/Kimi-K2.5"
    assert canonical_hf_id("https://huggingface.co/Someone/Unlisted-Model/tree/v2") == "someone/unlisted-model"
    assert canonical_hf_id("Someone/Unlisted-Model@main") == "someone/unlisted-model"


# --- bundled names mistyped: the error says which one was likely meant ------------------------------------------

@pytest.mark.parametrize("typed, meant", [("llama-3.1-70b", "llama3.1-70b"), ("Llama3.1-70B", "llama3.1-70b"),
                                          ("deepseek_v3", "deepseek-v3"), ("qwen3-32", "qwen3-32b")])
def test_a_mistyped_bundled_model_name_says_which_one_it_likely_meant(typed, meant):
    result = runner.invoke(app, ["predict", "-m", typed, "-H", "h100-sxm", "--gpus", "8", "-p", "tp=8",
                                 "--workload", "serve", "--input-len", "64", "--output-len", "16"])
    assert_user_error(result, "field '--model'", f"unknown model {typed!r} (did you mean {meant!r}?)")


def test_a_name_like_none_of_the_bundled_ones_gets_no_guess():
    from autotune.inputs.resources import closest_name

    assert closest_name("foo", ["llama3.1-8b", "deepseek-v3"]) is None
    assert closest_name("b200-sxm-180GB", ["b200-sxm-180gb", "b300-sxm-288gb"]) == "b200-sxm-180gb"


def test_a_shortened_name_suggests_the_one_bundled_name_holding_all_its_parts():
    from autotune.inputs.resources import bundled_names, closest_name

    assert closest_name("a100-80gb", bundled_names("hardware")) == "a100-sxm4-80gb"
    assert closest_name("qwen3-235b", bundled_names("models")) == "qwen3-235b-a22b"
    result = runner.invoke(app, ["predict", "-m", "llama3.1-8b", "-H", "a100-80gb", "--gpus", "8", "-p", "tp=8",
                                 "--workload", "serve", "--input-len", "64", "--output-len", "16"])
    assert_user_error(result, "field '--hardware'", "(did you mean 'a100-sxm4-80gb'?)")
