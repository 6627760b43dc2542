"""Bad input named in one message, exit status 2, no traceback: numbers, files, flags (issue 14, item 2).

Each case is run as a person would type it, through typer's CliRunner.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
SMALL = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16"]
SMALL_ANY_GPUS = [*SMALL[:4], *SMALL[6:]]  # without --gpus, to add another (an option is given once)
SERVE = ["--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "512",
         "--output-len", "128"]
PROFILE = (ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml").read_text()
SPEC = (ROOT / "profiles" / "models" / "llama3-8b.yaml").read_text()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def predicted(result) -> dict:
    """The JSON `predict --json` printed, after checking that its exit status agrees with it: 0 when the plan runs,
    1 when it does not (out of memory, past the engine's budget, a rule it breaks) -- its numbers printed either way."""
    assert "Traceback" not in result.output, result.output
    document = json.loads(result.stdout)
    estimate = document.get("estimate")
    assert result.exit_code == (0 if estimate and estimate["fits"] else 1), (result.exit_code, result.output)
    return document


def assert_user_error(result, *needles: str) -> None:
    """Exit 2, one line on stderr starting with 'error:', naming each needle; no traceback, nothing on stdout."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:"), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert result.stdout == ""


# --- numbers on the command line: NaN, infinity, overflow ------------------------------------------------

@pytest.mark.parametrize("args, flag", [
    (["search", *SMALL, "--tokens", "nan"], "--tokens"),
    (["search", *SMALL, "--tokens", "inf"], "--tokens"),
    (["search", *SMALL, "--tokens", "1e-320"], "--tokens"),  # below one step's tokens: a typo, not a budget
    (["search", *SMALL_ANY_GPUS, "--gpus", "8..16", "--tokens", "1e3", "--deadline", "3d"], "--tokens"),
    (["search", *SMALL, "--price", "-inf"], "--price"),
    (["predict", *SMALL, "--plan", "tp=1", "--price", "nan"], "--price"),
    (["search", *SMALL_ANY_GPUS, "--gpus", "8..16", "--tokens", "1e12", "--pue", "nan"], "--pue"),
    (["search", *SMALL_ANY_GPUS, "--gpus", "8..16", "--tokens", "1e12", "--grid-intensity", "inf"], "--grid-intensity"),
    (["search", *SMALL[:-2], "-b", "99999999999999999999999"], "--global-batch"),
    (["search", *SMALL[:-4], "-s", "1" + "0" * 30, "-b", "16"], "--seq-len"),
    (["search", *SERVE, "--request-rate", "inf"], "--request-rate"),
    (["search", *SERVE, "--request-rate", "nan"], "--request-rate"),
    (["search", *SERVE, "--ttft-ms", "inf"], "--ttft-ms"),
    (["predict", *SERVE, "--plan", "tp=1", "--tpot-ms", "nan"], "--tpot-ms"),
    (["worker", "--storage", "sqlite:///never.db", "--study", "s", "--wait", "nan"], "--wait"),
    (["worker", "--storage", "sqlite:///never.db", "--study", "s", "--wait", "1e12"], "--wait"),
    (["tune", *SMALL, "--run", "true", "--trial-timeout", "inf"], "--trial-timeout"),
    (["tune", *SMALL, "--run", "true", "--margin", "nan"], "--margin"),
    (["search", *SMALL_ANY_GPUS, "--gpus", "99999999999"], "--gpus"),
    (["search", *SMALL_ANY_GPUS, "--gpus", "8..99999999999", "--tokens", "1e12"], "--gpus"),
    (["search", *SMALL, "--seed", "-1"], "--seed"),
    (["search", *SMALL, "--seed", str(2**32)], "--seed"),
])
def test_non_finite_and_absurd_numbers_on_the_command_line(args, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be created here either
    assert_user_error(invoke(*args), flag)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [
    ["search", *SMALL, "--trials", "1000001"],
    ["search", *SMALL, "--sampler", "tpe", "--trials", "2000000"],
    ["tune", *SMALL, "--run", "true", "--trials", "5000000"],
    ["worker", "--storage", "sqlite:///never.db", "--study", "s", "--trials", "5000000"],
])
def test_absurd_trials_are_capped_with_a_reason(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*args), "--trials", "1,000,000")


def test_report_trials_are_capped(tmp_path):
    assert_user_error(invoke("report", str(tmp_path / "plans.json"), "--trials", "99999999", "--out", tmp_path / "r"),
                      "--trials", "10,000")


# --- numbers in files: YAML profiles, specs, spaces, overlays; JSON configs -------------------------------

def profile_with(old: str, new: str) -> str:
    assert old in PROFILE, old
    return PROFILE.replace(old, new, 1)


@pytest.mark.parametrize("text, field", [
    (profile_with("memory_gib: 79.1", "memory_gib: .nan"), "memory_gib"),
    (profile_with("memory_gib: 79.1", "memory_gib: .inf"), "memory_gib"),
    (profile_with("memory_gib: 79.1", "memory_gib: 1.0e+400"), "memory_gib"),
    (profile_with("memory_gib: 79.1", "memory_gib: 1.0e+200"), "memory_gib"),
    (profile_with("gpus_per_node: 8", "gpus_per_node: 99999999999999999999999"), "gpus_per_node"),
])
def test_non_finite_numbers_in_a_hardware_profile(text, field, tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text(text)
    assert_user_error(invoke("search", *SMALL[:2], "-H", path, *SMALL[4:]), "gpu.yaml", field)
    assert_user_error(invoke("hardware", "show", path), "gpu.yaml", field)


@pytest.mark.parametrize("old, new, field", [
    ("n_layers: 32", "n_layers: 1000000000000", "n_layers"),
    ("n_layers: 32", "n_layers: .nan", "n_layers"),
    ("hidden_size: 4096", "hidden_size: 1.0e+400", "hidden_size"),
])
def test_absurd_numbers_in_a_model_spec(old, new, field, tmp_path):
    assert old in SPEC
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace(old, new, 1))
    assert_user_error(invoke("models", "show", path), "spec.yaml", field)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999", "9" * 5000])
def test_non_finite_numbers_in_an_hf_config(value, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "num_hidden_layers": ' + value + ', "hidden_size": 4096, '
                    '"intermediate_size": 14336, "num_attention_heads": 32, "vocab_size": 128256}')
    assert_user_error(invoke("search", "-m", path, *SMALL[2:]), "config.json")


def test_nan_in_a_calibration_overlay(tmp_path):
    path = tmp_path / "calib.yaml"
    path.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency: {gemm: .nan}\n")
    assert_user_error(invoke("search", *SMALL, "--calibration", path), "calib.yaml", "gemm")
    path.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency: {gemm: .inf}\n")
    assert_user_error(invoke("predict", *SMALL, "--plan", "tp=1", "--calibration", path), "calib.yaml", "gemm")


@pytest.mark.parametrize("name, text", [
    ("deep.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n"),
    ("deep.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
])
def test_deep_nesting_is_an_input_error(name, text, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    assert_user_error(invoke("search", "-m", path, *SMALL[2:]), name, "nested too deeply")


# --- flags that conflict or lack their partner -------------------------------------------------------------

def test_conflicting_fix_values_are_refused():
    assert_user_error(invoke("search", *SMALL, "--fix", "tp=2", "--fix", "tp=4"), "--fix", "tp is fixed twice")
    assert_user_error(invoke("search", *SMALL, "--fix", "tp=2,pp=2", "--fix", "pp=1"), "--fix", "pp is fixed twice")
    assert_user_error(invoke("search", *SERVE, "--fix", "tp=2", "--fix", "tp=4"), "--fix", "tp is fixed twice")
    same = invoke("search", *SMALL, "--fix", "tp=2", "--fix", "tp=2", "--json")
    assert same.exit_code == 0, same.output


def test_study_without_storage(tmp_path):
    assert_user_error(invoke("search", *SMALL, "--study", "s"), "--study", "--storage")
    assert_user_error(invoke("report", "--study", "s", "--out", tmp_path / "r"), "--storage")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("text", ["3m", "1.5m"])
def test_deadline_in_m_is_ambiguous(text):
    assert_user_error(invoke("search", *SMALL_ANY_GPUS, "--gpus", "8..16", "--tokens", "1e9", "--deadline", text),
                      "--deadline", "mo", "min")


def test_deadline_in_minutes_and_months():
    from autotune.search import capacity as cap

    assert cap.parse_duration_days("90min") == pytest.approx(90 / 1440)
    assert cap.parse_duration_days("2mo") == pytest.approx(60)
    assert_user_error(invoke("search", *SMALL_ANY_GPUS, "--gpus", "8..16", "--tokens", "1e9", "--deadline", "1e999d"),
                      "--deadline")


# --- CSVs of measured runs ---------------------------------------------------------------------------------

TRAINING_CSV = ROOT / "tests" / "data" / "training_runs_small.csv"
SERVING_CSV = ROOT / "tests" / "data" / "serving_runs_small.csv"


def csv_rows(path: Path) -> list[dict]:
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def write_csv(path: Path, rows: list[dict], header: list[str] | None = None) -> Path:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        columns = header or list(rows[0])
        writer.writerow(columns)
        for row in rows:
            writer.writerow([row.get(c, "") for c in (header or list(rows[0]))])
    return path


@pytest.fixture(params=[TRAINING_CSV, SERVING_CSV], ids=["training", "serving"])
def runs_csv(request) -> Path:
    return request.param


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_folder_given_as_the_csv(command, tmp_path):
    folder = tmp_path / "runs.csv"
    folder.mkdir()
    extra = ["--out", tmp_path / "calib.yaml"] if command == "calibrate" else []
    assert_user_error(invoke(command, folder, *extra), "runs.csv", "folder")


@pytest.mark.parametrize("encoding, needle", [("utf-16", "UTF-16"), ("utf-32", "UTF-32")])
def test_utf16_csv_is_refused_with_the_fix(runs_csv, encoding, needle, tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(runs_csv.read_text(encoding="utf-8"), encoding=encoding)
    assert_user_error(invoke("validate", path), "runs.csv", needle, "UTF-8")


def test_latin1_bytes_are_refused_with_the_line(runs_csv, tmp_path):
    path = tmp_path / "runs.csv"
    lines = runs_csv.read_text(encoding="utf-8").encode("ascii", errors="replace").decode("ascii").splitlines()
    lines[2] = lines[2].replace(",", ",Müller ", 1)  # one Latin-1 byte (0xfc) on line 3
    path.write_bytes("\n".join(lines).encode("latin-1"))
    assert_user_error(invoke("validate", path), "runs.csv", "not UTF-8", "line 3")


def test_excel_utf8_bom_is_accepted(runs_csv, tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(runs_csv.read_text(encoding="utf-8"), encoding="utf-8-sig")
    plain = invoke("validate", runs_csv, "--json")
    with_bom = invoke("validate", path, "--json")
    assert with_bom.exit_code == 0 == plain.exit_code, with_bom.output
    import json

    assert json.loads(with_bom.stdout)["rows"] == json.loads(plain.stdout)["rows"]


def test_duplicate_column_names(runs_csv, tmp_path):
    rows = csv_rows(runs_csv)
    header = list(rows[0]) + ["tp"]
    path = write_csv(tmp_path / "runs.csv", rows, header)
    assert_user_error(invoke("validate", path), "runs.csv", "'tp' more than once")


def test_duplicate_ids(runs_csv, tmp_path):
    rows = csv_rows(runs_csv)
    path = write_csv(tmp_path / "runs.csv", rows + [rows[0]])
    assert_user_error(invoke("validate", path), "runs.csv", f"id {rows[0]['id']!r} appears twice")
    assert_user_error(invoke("calibrate", write_csv(tmp_path / "t.csv", csv_rows(TRAINING_CSV) * 2),
                             "--out", tmp_path / "c.yaml"), "t.csv", "appears twice")
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-Infinity", "1e400", "1e300"])
def test_non_finite_cells_name_the_row_and_column(runs_csv, value, tmp_path):
    rows = csv_rows(runs_csv)
    column = "n_gpus"
    rows[0][column] = value
    path = write_csv(tmp_path / "runs.csv", rows)
    assert_user_error(invoke("validate", path), "runs.csv", f"row {rows[0]['id']!r}", column)
    if runs_csv == TRAINING_CSV:
        assert_user_error(invoke("calibrate", path, "--out", tmp_path / "c.yaml"), "runs.csv", column)
        assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("value", ["0", "-2"])
def test_zero_or_negative_parallel_sizes(runs_csv, value, tmp_path):
    rows = csv_rows(runs_csv)
    rows[0]["tp"] = value
    path = write_csv(tmp_path / "runs.csv", rows)
    assert_user_error(invoke("validate", path), "runs.csv", f"row {rows[0]['id']!r}", "tp", ">= 1")


def test_training_layouts_that_do_not_multiply_out_are_skipped_with_the_reason(tmp_path):
    rows = csv_rows(TRAINING_CSV)
    bad = {**rows[0], "dp": str(int(rows[0]["dp"]) + 1)}
    mixed = invoke("validate", write_csv(tmp_path / "mixed.csv", [bad, *rows[1:]]))
    assert mixed.exit_code == 0, mixed.output
    assert f"skipped {bad['id']}: layout does not multiply out" in mixed.stderr
    every = write_csv(tmp_path / "all.csv", [{**r, "tp": "3"} for r in rows if r.get("usable", "true") != "false"])
    assert_user_error(invoke("validate", every), "all.csv", "no usable rows", "does not multiply out")
    assert_user_error(invoke("calibrate", every, "--out", tmp_path / "c.yaml"), "all.csv", "no usable rows to fit")


def test_serving_layouts_that_do_not_multiply_out_are_skipped_with_the_reason(tmp_path):
    rows = csv_rows(SERVING_CSV)
    bad = {**rows[0], "tp": "4", "pp": "1", "n_gpus": "6"}
    result = invoke("validate", write_csv(tmp_path / "s.csv", [bad, *rows[1:]]), "--json")
    assert result.exit_code == 0, result.output
    import json

    skipped = {s["id"]: s["reason"] for s in json.loads(result.stdout)["skipped"]}
    assert "layout does not multiply out" in skipped[bad["id"]]


# --- malformed plans.json entries, for explain, emit and report ----------------------------------------------

@pytest.fixture(scope="module")
def good_docs(tmp_path_factory) -> dict[str, dict]:
    import json

    base = tmp_path_factory.mktemp("docs")
    train = invoke("search", *SMALL, "--out", base / "train")
    serve = invoke("search", *SERVE, "--out", base / "serve")
    assert train.exit_code == 0 and serve.exit_code == 0, (train.output, serve.output)
    return {kind: json.loads((base / kind / "plans.json").read_text()) for kind in ("train", "serve")}


def _set(doc: dict, path: str, value) -> dict:
    import copy

    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return doc


class _Delete:
    """Marks a key to remove from the document (a stable repr keeps test ids the same in every process)."""

    def __repr__(self) -> str:
        return "DELETE"


_DELETE = _Delete()
ALL = ("explain", "emit", "report")
MALFORMED = [
    ("plans", "a list"),
    ("plans", []),
    ("plans.0.plan", None),
    ("plans.0.plan", {"tp": "eight"}),
    ("plans.0.plan", {"tp": 3}),
    ("plans.0.plan", {"tp": [1, 2]}),
    ("inputs", ["not", "a", "mapping"]),
    ("inputs.gpus", -8),
    ("inputs.gpus", "8"),
    ("inputs.gpus", 10**40),
    ("inputs.gpus_per_node", 0),
    ("inputs.model_spec", "llama"),
    ("inputs.model_spec.n_layers", "x"),
    ("inputs.model_spec.n_layers", 10**12),
    ("inputs.model_spec.n_heads", 0),
    ("inputs.hardware_profile.memory_gib", 1e300),
    ("inputs.hardware_profile.memory_gib", -80),
    ("inputs.hardware_profile.intra_node", None),
]
# Fields only some commands read: explain and emit estimate the plan again; explain takes plans by position.
PARTLY = [
    ("inputs.space_spec.axes", {"tp": "all"}, ("report",)),
]
TRAIN_ONLY = [
    ("inputs.seq_len", 0),
    ("inputs.global_batch", 1.5),
    ("inputs.tokens", -1),
    ("inputs.tokens", 1e-320),  # below one step's tokens, as search refuses: emit wrote --train-iters 1
    ("inputs.price_usd_per_gpu_hour", -1),  # the profile embedded beside it hid it from explain, emit and report
    ("inputs.precisions", ["fp2"]),  # explain and emit did not read these two, which report refused
    ("inputs.memory_headroom", 2),
]
TRAIN_ONLY_PARTLY = [
    ("plans.0.rank", _DELETE, ("emit", "report")),
    ("plans.0.estimate", None, ("report",)),
    ("plans.0.estimate.tokens_per_s_per_gpu", "fast", ("report",)),
    ("plans.0.estimate.time_breakdown_s", {"compute": "x"}, ("report",)),
    ("capacity", {"candidates": "x"}, ("report",)),
]
SERVE_ONLY = [
    ("inputs.input_len", _DELETE),
    ("inputs.output_len", 0),
    ("inputs.ttft_ms", -5),
    ("inputs.concurrency", 2.5),
    ("plans.0.plan", {"tp": 1, "weights": "fp3"}),
    ("plans.0.plan", {"tp": 1, "replicas": 99}),
]


def _commands(path: Path, tmp_path: Path, kind: str, which=ALL) -> list[list]:
    emit_format = "vllm" if kind == "serve" else "megatron"
    every = {"explain": ["explain", path], "emit": ["emit", path, "--format", emit_format],
             "report": ["report", path, "--out", tmp_path / "rep", "--trials", "0"]}
    return [every[name] for name in which]


@pytest.mark.parametrize("kind, path, value, which",
                         [("train", p, v, ALL) for p, v in MALFORMED + TRAIN_ONLY]
                         + [("train", *case) for case in PARTLY + TRAIN_ONLY_PARTLY]
                         + [("serve", p, v, ALL) for p, v in MALFORMED + SERVE_ONLY]
                         + [("serve", *case) for case in PARTLY],
                         ids=lambda x: str(x)[:30])
def test_malformed_plans_json_is_one_error_for_explain_emit_and_report(good_docs, kind, path, value, which, tmp_path):
    """Each command that reads the broken field refuses the file in one line naming it; none crashes."""
    import json

    doc = _set(good_docs[kind], path, value)
    target = tmp_path / "plans.json"
    target.write_text(json.dumps(doc))
    for args in _commands(target, tmp_path, kind, which):
        assert_user_error(invoke(*args), "plans.json")
        assert not (tmp_path / "rep").exists()
    for args in _commands(target, tmp_path, kind, [c for c in ALL if c not in which]):
        result = invoke(*args)
        assert result.exit_code in (0, 2) and isinstance(result.exception, (SystemExit, type(None))), result.output


@pytest.mark.parametrize("text, needle", [
    ('{"plans": [], "inputs": {"gpus": NaN}}', "NaN"),
    ('{"plans": [], "inputs": {"gpus": 1e999}}', "overflows"),
    ('{"plans": [' + "[" * 50_000 + "]" * 50_000 + '], "inputs": {}}', "nested too deeply"),
    ("not json at all", "is not JSON"),
    ("[1, 2, 3]", "'plans' list"),
])
def test_unreadable_plans_json(text, needle, tmp_path):
    target = tmp_path / "plans.json"
    target.write_text(text)
    for args in _commands(target, tmp_path, "train"):
        assert_user_error(invoke(*args), "plans.json", needle)


def test_plans_json_in_utf16_or_a_folder_without_one(tmp_path):
    target = tmp_path / "plans.json"
    target.write_text('{"plans": [], "inputs": {}}', encoding="utf-16")
    assert_user_error(invoke("explain", target), "plans.json", "not JSON")
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in (["explain", empty], ["emit", empty], ["report", empty, "--out", tmp_path / "r"]):
        assert_user_error(invoke(*args), "plans.json", "is a folder without a plans.json")


# --- --out: under a file, not writable, under a missing parent; checked before the work ----------------------

def _blockers(tmp_path: Path) -> dict[str, Path]:
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me\n")
    return {"under a file": a_file / "out", "is a file": a_file, "unwritable": Path("/proc/autotune-cannot-write/out")}


@pytest.mark.parametrize("case", ["under a file", "is a file", "unwritable"])
def test_out_that_cannot_be_written_is_refused_before_any_work(case, tmp_path, good_docs):
    import json

    out = _blockers(tmp_path)[case]
    plans = tmp_path / "plans.json"
    plans.write_text(json.dumps(good_docs["train"]))
    calls = [
        ["search", *SMALL, "--out", out],
        ["search", *SERVE, "--out", out],
        ["search", *SMALL_ANY_GPUS, "--gpus", "8..16", "--tokens", "1e12", "--out", out],
        ["report", plans, "--out", out],
        ["emit", plans, "--out", out],
        ["calibrate", TRAINING_CSV, "--out", out],
    ]
    for args in calls:
        result = invoke(*args)
        assert_user_error(result, "out" if case != "unwritable" else "autotune-cannot-write")
        # refused by the check before the work (a folder it cannot create, even as root on /proc), not by the
        # write after it, whose error asks to check the path, its permissions and free space
        assert "free space" not in result.stderr, (args, result.stderr)
    assert (tmp_path / "a-file").read_text() == "keep me\n"


def test_tune_checks_calibrate_destination_before_running_a_benchmark(tmp_path):
    marker = tmp_path / "ran"
    blocked = _blockers(tmp_path)["under a file"]
    result = invoke("tune", *SMALL, "--run", f"touch {marker}", "--storage", f"sqlite:///{tmp_path}/t.db",
                    "--trials", "1", "--calibrate", blocked)
    assert_user_error(result, "--calibrate")
    assert not marker.exists()


def test_out_under_missing_parents_is_created(tmp_path, good_docs):
    import json

    plans = tmp_path / "plans.json"
    plans.write_text(json.dumps(good_docs["serve"]))
    runs = write_csv(tmp_path / "runs.csv", csv_rows(TRAINING_CSV)[:6])  # a fit in 2 s, not 12
    assert invoke("calibrate", runs, "--out", tmp_path / "a" / "b" / "calib.yaml").exit_code == 0
    assert (tmp_path / "a" / "b" / "calib.yaml").is_file()
    assert invoke("emit", plans, "--format", "vllm", "--out", tmp_path / "c" / "d").exit_code == 0
    assert (tmp_path / "c" / "d" / "serve_vllm.sh").is_file()


def test_calibrate_refuses_a_folder_and_an_existing_file_without_force(tmp_path):
    existing = tmp_path / "calib.yaml"
    existing.write_text("mine\n")
    assert_user_error(invoke("calibrate", TRAINING_CSV, "--out", existing), "calib.yaml", "--force")
    assert existing.read_text() == "mine\n"
    assert_user_error(invoke("calibrate", TRAINING_CSV, "--out", tmp_path), "is a folder")


def test_serving_search_does_not_overwrite_a_folder_without_force(tmp_path):
    out = tmp_path / "srv"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    assert_user_error(invoke("search", *SERVE, "--out", out), "not empty", "--force")
    assert invoke("search", *SERVE, "--out", out, "--force").exit_code == 0
    assert (out / "notes.txt").read_text() == "mine\n"


# --- found by the fuzz test (tests/test_fuzz_cli.py) ---------------------------------------------------------

def test_emit_rank_below_one_is_refused_even_with_a_plan_string():
    assert_user_error(invoke("emit", "tp=8", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096",
                             "-b", "16", "--rank", "0"), "--rank")


def test_worker_refuses_run_on_an_exact_search_study(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    assert invoke("search", *SMALL, "--storage", url, "--study", "s", "--json").exit_code == 0
    assert_user_error(invoke("worker", "--storage", url, "--study", "s", "--run", "true"), "--run")


def test_validate_refuses_a_calibration_overlay_for_serving_runs(tmp_path):
    overlay = tmp_path / "calib.yaml"
    overlay.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency: {gemm: 0.6}\n")
    assert_user_error(invoke("validate", SERVING_CSV, "--calibration", overlay), "--calibration")
