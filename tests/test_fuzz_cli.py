"""Fuzz every command: no traceback, ever; and no exit 0 for input that is wrong (issue 14, item 5).

Hypothesis generates argument lists and input files -- model spec YAML, HF config.json, hardware
profiles, search spaces, calibration overlays, plans.json (training and serving), measured-run CSVs,
study storages -- for search, predict, explain, emit, report, validate, calibrate, tune, worker,
hardware and models.  Each generated case starts from a valid invocation on a small problem and
either keeps it valid, breaks it in a way the generator knows is wrong (a NaN, an unknown name, a
folder given as a file, conflicting flags, a malformed file, ...: marked invalid), or scrambles a
value or a file with arbitrary text (validity unknown).  Every case runs in-process through typer's
CliRunner with nothing mocked.

A case fails when an exception other than SystemExit escapes (a traceback), when an invalid case
exits 0 (a silent accept), or when an invalid case exits with anything but 2 (bad input is exit 2).
The run is deterministic (derandomized) with a fixed budget of FUZZ_EXAMPLES cases (1,300 by
default, shared among the commands, one test each; set AUTOTUNE_FUZZ_EXAMPLES to change it); the counts are printed and written to
AUTOTUNE_FUZZ_REPORT when that is set.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autotune.cli import app

ROOT = Path(__file__).resolve().parent.parent
FUZZ_EXAMPLES = int(os.environ.get("AUTOTUNE_FUZZ_EXAMPLES", "1300"))
runner = CliRunner()

# --- the valid material every case starts from -------------------------------------------------------------

TINY_SPEC = {"name": "tiny", "n_layers": 4, "hidden_size": 1024, "ffn_hidden_size": 2816, "n_heads": 8,
             "n_kv_heads": 8, "vocab_size": 32000, "max_seq_len": 8192}
PROFILE = yaml.safe_load((ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml").read_text())
PROFILE = {**PROFILE, "name": "my-gpu"}
SPACE = yaml.safe_load((ROOT / "tests" / "bench_scripts" / "space_small.yaml").read_text())
SERVE_SPACE = {"name": "s", "axes": {"tp": [1, 2], "pp": [1], "ep": [1], "weights": ["bf16", "fp8"], "kv": ["bf16"],
                                     "max_batch": [16, "fit"]}}
OVERLAY = {"hardware": {"h100-sxm5-80gb": {"efficiency": {"gemm": 0.6, "attention": 0.4}}}}
HF_CONFIG = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 2816,
             "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000,
             "max_position_embeddings": 8192, "_name_or_path": "org/tiny-llama"}
TRAIN_ROWS = list(csv.DictReader(io.StringIO((ROOT / "tests" / "data" / "training_runs_small.csv").read_text())))
SERVE_ROWS = list(csv.DictReader(io.StringIO((ROOT / "tests" / "data" / "serving_runs_small.csv").read_text())))
TRAIN_ROWS = [r for r in TRAIN_ROWS if r.get("usable", "true") != "false"][:4]
SERVE_ROWS = SERVE_ROWS[:4]
HOSTILE = ["$(touch PWNED)", "`touch PWNED`", "a; touch PWNED", "x\ny", "'\"", "ünï cödé", "--help", "-m",
           "a" * 300, "..", "/", "%s%n", "\x00"]

MODELS = ["llama3-8b", "@tiny.yaml", "@cfg/config.json"]
HARDWARE = ["h100-sxm5-80gb", "a100-sxm4-80gb", "@gpu.yaml"]


@dataclass
class Case:
    """One invocation: its arguments ("@name" stands for the file ``name`` of the case's folder), its files,
    and whether the generator knows it is wrong."""

    command: str
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    invalid: bool = False
    why: str = "valid"

    def breaks(self, why: str) -> "Case":
        self.invalid = True
        self.why = why
        return self


def y(data) -> bytes:
    return yaml.safe_dump(data, sort_keys=False).encode()


def j(data) -> bytes:
    return json.dumps(data).encode()


def csv_bytes(rows: list[dict], header: list[str] | None = None) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    columns = header or list(rows[0])
    writer.writerow(columns)
    for row in rows:
        writer.writerow([row.get(c, "") for c in columns])
    return out.getvalue().encode()


def standard_files() -> dict[str, bytes]:
    return {"tiny.yaml": y(TINY_SPEC), "cfg/config.json": j(HF_CONFIG), "gpu.yaml": y(PROFILE),
            "space.yaml": y(SPACE), "serve-space.yaml": y(SERVE_SPACE), "calib.yaml": y(OVERLAY),
            "a-file": b"keep\n"}


# --- bad values the generator knows are wrong, per kind of option -----------------------------------------

BAD_COUNT = ["0", "-3", "nan", "inf", "99999999999999999999", "1e400"]  # a whole number >= 1
BAD_POSITIVE = ["0", "-1", "nan", "inf", "-inf", "1e400"]  # a finite number > 0
BAD_NONNEGATIVE = ["-1", "nan", "inf", "-inf"]  # a finite number >= 0
BAD_TEXT_NUMBER = ["abc", "1,5", "0x1g", ""]  # not a number at all (a usage error, exit 2)
JUNK = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40),
                 st.sampled_from(["-1", "0", "1", "2", "nan", "1e9", "tp=2", "8..16", "true", "{}", "[]"]))


def junk_yaml_value():
    return st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                     st.text(max_size=12), st.lists(st.integers(-4, 64), max_size=3),
                     st.dictionaries(st.text(max_size=6), st.integers(), max_size=2))


@st.composite
def spec_file(draw) -> tuple[bytes, bool, str]:
    """A model spec YAML: valid, known-bad, or scrambled (validity unknown)."""
    kind = draw(st.sampled_from(["valid", "bad", "bad", "junk"]))
    spec = dict(TINY_SPEC)
    if kind == "valid":
        spec["n_layers"] = draw(st.sampled_from([2, 4, 8]))
        spec["name"] = draw(st.sampled_from(["tiny", *HOSTILE[:6]]))
        return y(spec), False, "valid spec"
    if kind == "bad":
        key, value, why = draw(st.sampled_from([
            ("n_layers", float("nan"), "NaN layers"), ("hidden_size", float("inf"), "infinite width"),
            ("n_layers", 10**12, "absurd layers"), ("n_heads", 0, "zero heads"), ("n_layers", -4, "negative layers"),
            ("vocab_size", "big", "text size"), ("n_layer", 4, "unknown key"), ("n_kv_heads", 3, "kv heads do not divide"),
            ("mlp", "relu", "unknown mlp"), ("moe", {"n_experts": 4, "top_k": 8, "expert_ffn_hidden_size": 8},
                                              "top_k > experts"),
        ]))
        spec[key] = value
        if draw(st.booleans()) and kind == "bad":
            return (draw(st.sampled_from([b"name: [unclosed\n", b"- a list\n", b"", b"\xff\xfe\x00bin",
                                          b"a: " + b"[" * 3000 + b"]" * 3000])), True, "malformed spec file")
        return y(spec), True, why
    spec[draw(st.sampled_from(sorted(TINY_SPEC)))] = draw(junk_yaml_value())
    return y(spec), False, "junk"


@st.composite
def profile_file(draw) -> tuple[bytes, bool, str]:
    kind = draw(st.sampled_from(["valid", "bad", "junk"]))
    profile = json.loads(json.dumps(PROFILE))
    if kind == "valid":
        profile["memory_gib"] = draw(st.sampled_from([40, 80, 141]))
        return y(profile), False, "valid profile"
    if kind == "bad":
        path, value, why = draw(st.sampled_from([
            ("memory_gib", float("nan"), "NaN memory"), ("memory_gib", float("inf"), "infinite memory"),
            ("memory_gib", 1e300, "absurd memory"), ("gpus_per_node", 0, "no GPUs per node"),
            ("peak_tflops", {"fp8": 1000}, "no bf16 peak"), ("intra_node", 5, "link not a mapping"),
            ("efficiency", {"gemm": 7.0}, "efficiency out of bounds"), ("tdp_w", "hot", "text power"),
        ]))
        profile[path] = value
        return y(profile), True, why
    profile[draw(st.sampled_from(sorted(PROFILE)))] = draw(junk_yaml_value())
    return y(profile), False, "junk"


@st.composite
def csv_file(draw, serving: bool) -> tuple[bytes, bool, str]:
    rows = [dict(r) for r in (SERVE_ROWS if serving else TRAIN_ROWS)]
    kind = draw(st.sampled_from(["valid", "valid", "bom", "bad", "bad", "junk"]))
    if kind == "valid":
        return csv_bytes(rows[: draw(st.integers(1, len(rows)))]), False, "valid csv"
    if kind == "bom":
        return b"\xef\xbb\xbf" + csv_bytes(rows), False, "Excel BOM"
    if kind == "bad":
        how = draw(st.sampled_from(["utf16", "latin1", "dupcol", "dupid", "nan", "inf", "tp0", "empty", "noid",
                                    "missing"]))
        if how == "utf16":
            return csv_bytes(rows).decode().encode("utf-16"), True, how
        if how == "latin1":
            text = csv_bytes(rows).decode("utf-8").encode("ascii", "replace")
            return text.replace(b",", b",\xe9", 1), True, how
        if how == "dupcol":
            header = list(rows[0]) + ["tp"]
            return csv_bytes(rows, header), True, how
        if how == "dupid":
            return csv_bytes(rows + [rows[0]]), True, how
        if how in ("nan", "inf"):
            rows[0]["n_gpus"] = how
            return csv_bytes(rows), True, f"{how} cell"
        if how == "tp0":
            rows[0]["tp"] = draw(st.sampled_from(["0", "-2"]))
            return csv_bytes(rows), True, how
        if how == "empty":
            return b"", True, how
        if how == "noid":
            rows[0]["id"] = ""
            return csv_bytes(rows), True, how
        header = [c for c in rows[0] if c not in ("tp", "n_layers")]
        return csv_bytes(rows, header), True, "missing columns"
    row = draw(st.integers(0, len(rows) - 1))
    column = draw(st.sampled_from(sorted(rows[0])))
    rows[row][column] = draw(st.one_of(st.text(max_size=10), st.sampled_from(["-1", "0", "1e9", "2.5", "x"])))
    return csv_bytes(rows), False, "junk cell"


# --- plans.json: one real search each, then broken or scrambled --------------------------------------------

@pytest.fixture(scope="module")
def plans_docs(tmp_path_factory) -> dict[str, dict]:
    base = tmp_path_factory.mktemp("fuzz-docs")
    small = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8"]
    train = runner.invoke(app, ["search", *small, "-s", "4096", "-b", "16", "--space",
                                str(ROOT / "tests" / "bench_scripts" / "space_small.yaml"), "--out", str(base / "t")])
    serve = runner.invoke(app, ["search", "--workload", "serve", *small, "--input-len", "512", "--output-len", "64",
                                "--space", str(_serve_space(base)), "--out", str(base / "s")])
    assert train.exit_code == 0 and serve.exit_code == 0, (train.output, serve.output)
    return {k: json.loads((base / k / "plans.json").read_text()) for k in ("t", "s")}


def _serve_space(base: Path) -> Path:
    path = base / "serve-space.yaml"
    path.write_bytes(y(SERVE_SPACE))
    return path


def _paths(doc, prefix=()):
    """Every path into a JSON document (dict keys and list indices)."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:2]):
            yield from _paths(v, (*prefix, i))


def _replace(doc, path, value):
    doc = json.loads(json.dumps(doc))
    if not path:
        return value
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


KNOWN_BAD_PLANS = [  # (path, value, why): every command that reads the file refuses these
    (("plans",), "x", "plans not a list"), (("plans",), [], "no plans"), (("inputs",), [], "inputs not a mapping"),
    (("plans", 0, "plan"), {"tp": "eight"}, "text tp"), (("plans", 0, "plan"), {"tp": 3}, "tp does not divide"),
    (("inputs", "gpus"), -8, "negative GPUs"), (("inputs", "model_spec", "n_layers"), "x", "text layers"),
    (("inputs", "model_spec", "n_heads"), 0, "zero heads"),
    (("inputs", "hardware_profile", "memory_gib"), 1e300, "absurd memory"),
]


@st.composite
def plans_file(draw, docs: dict, serving: bool) -> tuple[bytes, bool, str]:
    doc = docs["s" if serving else "t"]
    kind = draw(st.sampled_from(["valid", "valid", "bad", "bad", "text", "junk"]))
    if kind == "valid":
        return j(doc), False, "valid plans.json"
    if kind == "bad":
        path, value, why = draw(st.sampled_from(KNOWN_BAD_PLANS))
        if path[:2] == ("plans", 0):  # every plan, so that any --rank reads a broken one
            for i in range(len(doc["plans"])):
                doc = _replace(doc, ("plans", i, *path[2:]), value)
            return j(doc), True, why
        return j(_replace(doc, path, value)), True, why
    if kind == "text":
        text, why = draw(st.sampled_from([
            ('{"plans": [], "inputs": {"gpus": NaN}}', "NaN"), ('{"plans": [1e999], "inputs": {}}', "overflow"),
            ('{"plans": [' + "[" * 20000 + "]" * 20000 + '], "inputs": {}}', "deep nesting"),
            ("not json", "not JSON"), ("[1, 2]", "not an object"), ("", "empty"),
        ]))
        return text.encode(), True, why
    paths = list(_paths(doc))
    path = draw(st.sampled_from(paths[1:]))
    value = draw(st.one_of(junk_yaml_value().filter(lambda v: not (isinstance(v, float) and v != v)),
                           st.sampled_from([0, -1, 10**30, "", [], {}])))
    return j(_replace(doc, path, value)), False, "junk plans.json"


# --- one generator per command -----------------------------------------------------------------------------

def _maybe(draw, p: float) -> bool:
    return draw(st.floats(0, 1)) < p


@st.composite
def search_case(draw) -> Case:
    serving = _maybe(draw, 0.35)
    files = standard_files()
    model = draw(st.sampled_from(MODELS))
    if model == "@tiny.yaml":
        files["tiny.yaml"], bad, why = draw(spec_file())
    else:
        bad, why = False, "valid"
    hardware = draw(st.sampled_from(HARDWARE))
    if hardware == "@gpu.yaml" and _maybe(draw, 0.5):
        files["gpu.yaml"], hw_bad, hw_why = draw(profile_file())
        bad, why = (True, hw_why) if hw_bad else (bad, why)
    gpus = draw(st.sampled_from(["1", "2", "4", "8"]))
    argv = ["search", "-m", model, "-H", hardware, "--gpus", gpus]
    if serving:
        argv += ["--workload", "serve", "--input-len", draw(st.sampled_from(["128", "512", "2048"])),
                 "--output-len", draw(st.sampled_from(["16", "128"])), "--space", "@serve-space.yaml"]
        if _maybe(draw, 0.3):
            argv += ["--ttft-ms", draw(st.sampled_from(["100", "1000"])), "--tpot-ms", "50"]
        if _maybe(draw, 0.2):
            argv += draw(st.sampled_from([["--concurrency", "16"], ["--request-rate", "2.5"]]))
        if _maybe(draw, 0.2):
            argv += ["--out", "@out"] + (["--emit", draw(st.sampled_from(["vllm", "sglang", "vllm,sglang"]))]
                                          if _maybe(draw, 0.5) else [])
    else:
        argv += ["-s", draw(st.sampled_from(["1024", "4096"])), "-b", draw(st.sampled_from(["8", "16", "32"])),
                 "--space", "@space.yaml"]
        if _maybe(draw, 0.2):
            argv += ["--fix", draw(st.sampled_from(["tp=1", "zero=1", "recompute=full", "pp=1,tp=2"]))]
        if _maybe(draw, 0.15):
            argv += ["--sampler", "random", "--trials", draw(st.sampled_from(["3", "8"]))]
        if _maybe(draw, 0.15):
            argv += ["--tokens", "1e11", "--objective", draw(st.sampled_from(["time", "cost", "throughput,memory"]))]
        if _maybe(draw, 0.1):
            argv += ["--calibration", "@calib.yaml"]
        if _maybe(draw, 0.1):
            argv += ["--gpus", draw(st.sampled_from(["8..16", "1..4"])), "--tokens", "1e11"]
            if _maybe(draw, 0.5):
                argv += ["--deadline", draw(st.sampled_from(["30d", "720h", "2mo", "90min"])),
                         "--pue", "1.2", "--grid-intensity", "300"]
        if _maybe(draw, 0.2):
            argv += ["--out", "@out"] + (["--emit", "megatron"] if _maybe(draw, 0.3) else [])
        if _maybe(draw, 0.04):
            argv += ["--storage", "sqlite:///@s.db", "--study", "s", "--sampler", draw(st.sampled_from(
                ["auto", "random"])), "--trials", "3", "--heartbeat", "0"]
    if _maybe(draw, 0.3):
        argv += ["--json"]
    case = Case("search", argv, files, bad, why)
    return draw(break_some(case, serving))


def _flag_breaks(serving: bool) -> list[tuple[list[str], str]]:
    common = [(["--gpus", v], f"--gpus {v}") for v in ["0", "-8", "abc", "99999999999", "8..2"]]
    common += [(["--top", v], f"--top {v}") for v in ["0", "-1", "nan", "abc"]]
    common += [(["--price", v], f"--price {v}") for v in BAD_NONNEGATIVE]
    common += [(["-m", v], f"-m {v}") for v in ["no-such-model", "@missing.yaml", "@a-file/x.yaml", "@cfg/nope.json"]]
    common += [(["-H", v], f"-H {v}") for v in ["no-such-gpu", "@missing.yaml", "@a-file"]]
    common += [(["--workload", "both"], "unknown workload"), (["--out", "@a-file"], "--out is a file"),
               (["--out", "@a-file/sub"], "--out under a file"), (["--gpus-per-node", "0"], "0 GPUs per node"),
               (["--nodes", "0"], "0 nodes")]
    if serving:
        return common + [(["--input-len", v], f"--input-len {v}") for v in BAD_COUNT + BAD_TEXT_NUMBER] + [
            (["--output-len", v], f"--output-len {v}") for v in BAD_COUNT] + [
            (["--ttft-ms", v], f"--ttft-ms {v}") for v in BAD_POSITIVE] + [
            (["--tpot-ms", v], f"--tpot-ms {v}") for v in BAD_POSITIVE] + [
            (["--request-rate", v], f"--request-rate {v}") for v in BAD_POSITIVE] + [
            (["--concurrency", v], f"--concurrency {v}") for v in ["0", "-2", "nan"]] + [
            (["--concurrency", "4", "--request-rate", "1"], "both loads"),
            (["--fix", "tp=2", "--fix", "tp=4"], "conflicting --fix"), (["--fix", "weights=fp3"], "bad --fix"),
            (["--emit", "megatron", "--out", "@o2"], "training format for serving"),
            (["--emit", "vllm"], "--emit without --out"), (["--seq-len", "4096"], "training flag on serving"),
            (["--moe-capacity-factor", "1"], "training MoE flag on serving"),
            (["--space", "@missing.yaml"], "missing space")]
    return common + [(["-s", v], f"-s {v}") for v in BAD_COUNT + BAD_TEXT_NUMBER] + [
        (["-b", v], f"-b {v}") for v in BAD_COUNT] + [
        (["--tokens", v], f"--tokens {v}") for v in BAD_POSITIVE] + [
        (["--trials", v], f"--trials {v}") for v in ["0", "-1", "1000001", "nan"]] + [
        (["--seed", v], f"--seed {v}") for v in ["-1", str(2**32)]] + [
        (["--fix", v], f"--fix {v}") for v in ["tq=2", "tp=0", "dp=2", "tp", "zero=7"]] + [
        (["--moe-capacity-factor", v], f"--moe-capacity-factor {v}") for v in ["0", "-1", "nan", "inf", "1e9"]] + [
        (["--fix", "tp=2", "--fix", "tp=4"], "conflicting --fix"), (["--sampler", "annealing"], "unknown sampler"), (["--objective", "speed"], "unknown objective"),
        (["--objective", "time"], "time without --tokens"),
        (["--study", "s"], "--study without --storage"), (["--storage", "redis://x", "--study", "s"], "bad storage"),
        (["--gpus", "8..16", "--tokens", "1e11", "--deadline", "3m"], "ambiguous deadline"),
        (["--gpus", "8..16", "--tokens", "1e11", "--deadline", "soon"], "bad deadline"),
        (["--gpus", "8..16", "--tokens", "1e11", "--pue", "nan"], "NaN PUE"),
        (["--gpus", "8..16", "--tokens", "1e11", "--grid-intensity", "inf"], "infinite grid"),
        (["--gpus", "8..16"], "range without --tokens"), (["--emit", "megatron"], "--emit without --out"),
        (["--emit", "pdf", "--out", "@o2"], "unknown format"), (["--input-len", "5"], "serving flag on training"),
        (["--calibration", "@missing.yaml"], "missing overlay"), (["--space", "@a-file/s.yaml"], "space under a file"),
    ]


@st.composite
def break_some(draw, case: Case, serving: bool) -> Case:
    """Leave the case alone, break it in a known way (invalid), or put junk in one of its values (unknown)."""
    what = draw(st.sampled_from(["keep", "break", "break", "junk"]))
    if what == "break":
        # "--emit without --out" is no break where the case already writes a folder (the emit then has one)
        breaks = [b for b in _flag_breaks(serving) if not (b[1] == "--emit without --out" and "--out" in case.argv)]
        extra, why = draw(st.sampled_from(breaks))
        case.argv += extra
        return case.breaks(why)
    if what == "junk":
        values = [i for i, a in enumerate(case.argv) if i > 1 and not a.startswith("-") and case.argv[i - 1] != "--out"]
        if values:
            case.argv[draw(st.sampled_from(values))] = draw(JUNK)
            case.invalid, case.why = False, "junk value"
    return case


@st.composite
def predict_case(draw) -> Case:
    serving = _maybe(draw, 0.35)
    files = standard_files()
    model = draw(st.sampled_from(MODELS))
    if model == "@tiny.yaml":
        files["tiny.yaml"], bad, why = draw(spec_file())
    else:
        bad, why = False, "valid"
    argv = ["predict", "-m", model, "-H", draw(st.sampled_from(HARDWARE)), "--gpus", "8"]
    if serving:
        plan = draw(st.sampled_from(["tp=1", "tp=2,weights=fp8", "tp=4,kv=fp8,max_batch=64", "tp=8,pp=1"]))
        argv += ["--workload", "serve", "--input-len", "512", "--output-len", "64", "--plan", plan]
    else:
        plan = draw(st.sampled_from(["tp=1", "tp=2,zero=1", "tp=8,recompute=full", "pp=2,mbs=1", "tp=4,pp=2"]))
        argv += ["-s", "4096", "-b", "16", "--plan", plan]
    if _maybe(draw, 0.3):
        argv.append("--json")
    case = Case("predict", argv, files, bad, why)
    what = draw(st.sampled_from(["keep", "break", "junk-plan", "junk"]))
    if what == "break":
        extra, why = draw(st.sampled_from(_predict_breaks(serving)))
        case.argv += extra
        return case.breaks(why)
    if what == "junk-plan":
        keys = st.sampled_from(["tp", "pp", "cp", "ep", "vp", "sp", "zero", "mbs", "recompute", "precision", "offload",
                                "dp", "weights", "kv", "max_batch", "replicas", "x", ""])
        values = st.one_of(st.integers(-2, 64).map(str), st.sampled_from(["true", "full", "fp8", "nan", "1e9", ""]),
                           st.text(max_size=5))
        pairs = draw(st.lists(st.tuples(keys, values), min_size=0, max_size=4))
        case.argv[case.argv.index("--plan") + 1] = ",".join(f"{k}={v}" for k, v in pairs) or draw(JUNK)
        case.invalid, case.why = False, "junk plan"
    elif what == "junk":
        return _junk_value(draw, case)
    return case


def _junk_value(draw, case: Case) -> Case:
    values = [i for i, a in enumerate(case.argv) if i > 1 and not a.startswith("-")]
    case.argv[draw(st.sampled_from(values))] = draw(JUNK)
    case.invalid, case.why = False, "junk value"
    return case


def _predict_breaks(serving: bool) -> list[tuple[list[str], str]]:
    out = [(["--plan", "tq=2"], "unknown plan key"), (["--plan", "tp=abc"], "text tp"), (["--plan", "tp"], "no value"),
           (["--gpus", "8..16"], "range for predict"), (["--price", "nan"], "NaN price"),
           (["--plan", "tp=1,tp=2"], "key twice")]
    if serving:
        out += [(["--input-len", v], f"--input-len {v}") for v in BAD_COUNT] + [
            (["--tpot-ms", "nan"], "NaN TPOT"), (["--plan", "weights=fp3"], "unknown weights"),
            (["--plan", "max_batch=0"], "zero batch")]
    else:
        out += [(["-s", v], f"-s {v}") for v in BAD_COUNT] + [(["--tokens", "inf"], "infinite tokens"),
                                                               (["--plan", "tp=2,dp=8"], "dp does not match"),
                                                               (["--plan", "recompute=some"], "unknown recompute"),
                                                               (["--moe-capacity-factor", "nan"], "NaN capacity")]
    return out


@st.composite
def explain_case(draw, docs) -> Case:
    serving = _maybe(draw, 0.4)
    files = standard_files()
    if _maybe(draw, 0.8):
        files["run/plans.json"], bad, why = draw(plans_file(docs, serving))
        target = draw(st.sampled_from(["@run/plans.json", "@run"]))
        argv = ["explain", target, "--rank", draw(st.sampled_from(["1", "2"]))]
        case = Case("explain", argv, files, bad, why)
        what = draw(st.sampled_from(["keep", "keep", "break"]))
        if what == "break":
            extra, why = draw(st.sampled_from([
                (["--rank", "0"], "rank 0"), (["--rank", "999"], "rank beyond the plans"),
                (["--calibration", "@missing.yaml"], "missing overlay"), (["--plan", "tp=1"], "plans and --plan"),
                (["--rank", "nan"], "text rank")] + ([(["--seq-len", "8"], "training flag on serving")]
                                                     if serving else [])))
            case.argv += extra
            case.breaks(why)
        elif _maybe(draw, 0.3):
            case.argv.append("--json")
        return case
    argv = ["explain", "--plan", draw(st.sampled_from(["tp=1", "tp=2,zero=1", "pp=2"])), "-m", "llama3-8b", "-H",
            "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16"]
    case = Case("explain", argv, files)
    if _maybe(draw, 0.5):
        drop = draw(st.sampled_from(["-m", "-H", "--gpus", "-s", "-b"]))
        i = case.argv.index(drop)
        del case.argv[i:i + 2]
        case.breaks(f"missing {drop}")
    return case


@st.composite
def emit_case(draw, docs) -> Case:
    serving = _maybe(draw, 0.4)
    files = standard_files()
    fmt = draw(st.sampled_from(["vllm", "sglang"] if serving else ["megatron", "deepspeed", "torchtitan", "slurm"]))
    if _maybe(draw, 0.75):
        files["run/plans.json"], bad, why = draw(plans_file(docs, serving))
        argv = ["emit", draw(st.sampled_from(["@run/plans.json", "@run"])), "--format", fmt]
    else:
        bad, why = False, "valid"
        plan = "tp=1,weights=fp8" if serving else draw(st.sampled_from(["tp=1", "tp=2,zero=1", "tp=8,pp=1"]))
        argv = ["emit", plan, "--format", fmt, "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096"]
        if not serving:
            argv += ["-b", "16"]
        if _maybe(draw, 0.3):
            argv += ["--data-path", draw(st.sampled_from(HOSTILE)), "--tokenizer", draw(st.sampled_from(HOSTILE))]
    if fmt == "slurm" and _maybe(draw, 0.5):
        argv += ["--framework", draw(st.sampled_from(["megatron", "deepspeed", "torchtitan"]))]
    if _maybe(draw, 0.4):
        argv += ["--out", "@launch"]
    case = Case("emit", argv, files, bad, why)
    if _maybe(draw, 0.4):
        extra, why = draw(st.sampled_from([
            (["--format", "pdf"], "unknown format"), (["--framework", "jax"], "unknown framework"),
            (["--out", "@a-file"], "--out is a file"), (["--out", "@a-file/x"], "--out under a file"),
            (["--rank", "0"], "rank 0"), (["--plan", "tp=1"], "plan given twice")]))
        if extra[0] == "--framework" and fmt in ("vllm", "sglang"):
            return case
        case.argv += extra
        case.breaks(why)
    elif _maybe(draw, 0.2):
        case.argv += ["--json"]
    return case


@st.composite
def report_case(draw, docs) -> Case:
    files = standard_files()
    if _maybe(draw, 0.2):  # a stored study instead of a plans.json
        # the valid study last: Hypothesis draws the first choice most often, and a valid report draws its figures
        # (3-4 s, the same every time)
        study, storage, why = draw(st.sampled_from([
            ("nope", "sqlite:///@exact.db", "no such study"), ("s", "sqlite:///@missing.db", "no such storage file"),
            ("nope", "sqlite:///@exact.db", "no such study"), ("s", "journal:@missing.log", "no such journal"),
            ("s", "redis://x", "unknown storage"), ("s", "sqlite:///@exact.db", "valid")]))
        files["__exact__"] = b"1"
        return Case("report", ["report", "--storage", storage, "--study", study, "--out", "@rep", "--trials", "0"],
                    files, invalid=why != "valid", why=why)
    serving = _maybe(draw, 0.4)
    plans, bad, why = draw(plans_file(docs, serving))
    if not bad and _maybe(draw, 0.85):  # a valid report draws figures (seconds): keep most cases to the checks
        plans, bad, why = draw(st.sampled_from([(b"[]", True, "not plans"), (b"{", True, "not JSON"),
                                                (j(_replace(docs["t"], ("plans",), [])), True, "no plans")]))
    files["run/plans.json"] = plans
    argv = ["report", draw(st.sampled_from(["@run/plans.json", "@run"])), "--out", "@rep", "--trials", "0"]
    case = Case("report", argv, files, bad, why)
    if _maybe(draw, 0.4):
        extra, why = draw(st.sampled_from([
            (["--out", "@a-file"], "--out is a file"), (["--out", "@a-file/r"], "--out under a file"),
            (["--trials", "-1"], "negative trials"), (["--trials", "99999999"], "absurd trials"),
            (["--study", "s"], "--study without --storage and with a file"),
            (["--storage", "sqlite:///@none.db", "--study", "s"], "file and storage")]))
        case.argv += extra
        case.breaks(why)
    return case


@st.composite
def validate_case(draw) -> Case:
    files = standard_files()
    serving = _maybe(draw, 0.4)
    files["runs.csv"], bad, why = draw(csv_file(serving))
    argv = ["validate", "@runs.csv"]
    # The bundled tables are the same invocation every time (seconds each; _maybe's floats favour 0, so this comes
    # up about one case in fifteen): the training table and the invalid "both" here; test_conveniences runs serving.
    if _maybe(draw, 0.03):
        argv = ["validate", "--bundled", draw(st.sampled_from(["training", "both"]))]
        bad, why = (argv[-1] == "both"), f"--bundled {argv[-1]}"
    if _maybe(draw, 0.2):
        argv += ["--json"]
    case = Case("validate", argv, files, bad, why)
    if _maybe(draw, 0.25):
        extra, why = draw(st.sampled_from([
            (["--calibration", "@missing.yaml"], "missing overlay"), (["--worst", "nan"], "text worst")]))
        if not (serving and extra[0] == "--calibration"):
            case.argv += extra
            case.breaks(why)
    if _maybe(draw, 0.1):
        case.argv[1:2] = [draw(st.sampled_from(["@missing.csv", "@cfg", "@a-file/x.csv"]))]
        case.breaks("not a CSV file")
    return case


@st.composite
def calibrate_case(draw) -> Case:
    files = standard_files()
    content, bad, why = draw(csv_file(False))
    if not bad and _maybe(draw, 0.7):  # a fit takes a second or more: most cases check the input only
        content, bad, why = csv_bytes(TRAIN_ROWS).decode().encode("utf-16"), True, "utf16"
    files["runs.csv"] = content
    argv = ["calibrate", "@runs.csv", "--out", "@calib-out.yaml"]
    case = Case("calibrate", argv, files, bad, why)
    if _maybe(draw, 0.3):
        extra, why = draw(st.sampled_from([(["--out", "@a-file"], "existing --out without --force"),
                                           (["--out", "@a-file/c.yaml"], "--out under a file"),
                                           (["--out", "@cfg"], "--out is a folder")]))
        case.argv = case.argv[:2] + extra
        case.breaks(why)
    return case


BENCH_OK = "python3 -c 'print(\"{\\\"tokens_per_s_per_gpu\\\": 1000}\")'"


@st.composite
def tune_case(draw) -> Case:
    files = standard_files()
    argv = ["tune", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16", "--space",
            "@space.yaml", "--storage", "sqlite:///@t.db", "--trials", "1", "--prior-top", "1", "--trial-timeout", "20",
            "--heartbeat", "0", "--run", draw(st.sampled_from([BENCH_OK, "true", "false"]))]
    case = Case("tune", argv, files)
    if _maybe(draw, 0.7):  # a benchmark run costs a process: most cases check the input only
        extra, why = draw(st.sampled_from([
            (["--trials", "0"], "no trials"), (["--trials", "5000000"], "absurd trials"),
            (["--margin", "nan"], "NaN margin"), (["--margin", "2"], "margin > 1"),
            (["--trial-timeout", "inf"], "infinite timeout"), (["--trial-timeout", "0"], "zero timeout"),
            (["--sampler", "gp"], "gp for tune"), (["--run", "   "], "empty --run"), (["--run", "python 'x"], "bad quoting"),
            (["--calibrate", "@a-file/c.yaml"], "--calibrate under a file"), (["--heartbeat", "-1"], "negative heartbeat"),
            (["--storage", "redis://x"], "bad storage"), (["-s", "nan"], "text sequence")]))
        case.argv += extra
        case.breaks(why)
    return case


@st.composite
def worker_case(draw) -> Case:
    files = standard_files()
    have = _maybe(draw, 0.5)
    argv = ["worker", "--storage", "sqlite:///@exact.db" if have else "sqlite:///@none.db", "--study",
            draw(st.sampled_from(["s", "other"])) if have else "s", "--wait", draw(st.sampled_from(["0", "0.1"]))]
    case = Case("worker", argv, files, invalid=not have or argv[4] != "s", why="valid" if have else "no such study")
    if case.invalid and argv[4] == "other":
        case.why = "no such study in the storage"
    case.files["__exact__"] = b"1" if have else b""
    if _maybe(draw, 0.4):
        extra, why = draw(st.sampled_from([
            (["--wait", "nan"], "NaN wait"), (["--wait", "1e12"], "absurd wait"), (["--trials", "0"], "no trials"),
            (["--trials", "5000000"], "absurd trials"), (["--storage", "redis://x"], "bad storage"),
            (["--run", "true"], "--run on a search study"), (["--heartbeat", "-3"], "negative heartbeat")]))
        case.argv += extra
        case.breaks(why)
    return case


@st.composite
def catalog_case(draw) -> Case:
    files = standard_files()
    group = draw(st.sampled_from(["hardware", "models"]))
    if _maybe(draw, 0.2):
        return Case(group, [group, "list"], files)
    if group == "hardware":
        if _maybe(draw, 0.5):
            files["gpu.yaml"], bad, why = draw(profile_file())
            return Case(group, [group, "show", "@gpu.yaml"], files, bad, why)
        name = draw(st.sampled_from(["h100-sxm5-80gb", "no-such-gpu", "@missing.yaml", *HOSTILE[:4]]))
    else:
        if _maybe(draw, 0.5):
            files["tiny.yaml"], bad, why = draw(spec_file())
            return Case(group, [group, "show", "@tiny.yaml"], files, bad, why)
        name = draw(st.sampled_from(["llama3-8b", "@cfg/config.json", "no-such-model", "@missing.yaml", *HOSTILE[:4]]))
    bundled = name in ("h100-sxm5-80gb", "llama3-8b", "@cfg/config.json")
    return Case(group, [group, "show", name], files, invalid=not bundled, why="valid" if bundled else "unknown name")


def generators(docs) -> dict:
    """Each command's case generator and its share of the budget (a valid report or calibrate takes seconds)."""
    return {
        "search": (search_case(), 0.22), "predict": (predict_case(), 0.10), "explain": (explain_case(docs), 0.10),
        "emit": (emit_case(docs), 0.12), "report": (report_case(docs), 0.05), "validate": (validate_case(), 0.12),
        "calibrate": (calibrate_case(), 0.05), "tune": (tune_case(), 0.04), "worker": (worker_case(), 0.08),
        "catalog": (catalog_case(), 0.12),
    }


# --- running a case ------------------------------------------------------------------------------------------

@dataclass
class Stats:
    invocations: int = 0
    invalid: int = 0
    tracebacks: list = field(default_factory=list)
    silent_accepts: list = field(default_factory=list)
    wrong_status: list = field(default_factory=list)
    by_command: Counter = field(default_factory=Counter)
    by_exit: Counter = field(default_factory=Counter)
    seconds: Counter = field(default_factory=Counter)
    log: list = field(default_factory=list)  # every case: argv, why, invalid, exit status, last stderr line


def materialise(case: Case, folder: Path, exact_db: Path) -> list[str]:
    for name, content in case.files.items():
        if name == "__exact__":
            if content:
                shutil.copy(exact_db, folder / "exact.db")
            continue
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    argv = [a.replace("///@", f"///{folder}/").replace("journal:@", f"journal:{folder}/") for a in case.argv]
    return [a.replace("@", f"{folder}/", 1) if a.startswith("@") else a for a in argv]


def check_emitted_scripts(folder: Path) -> None:
    """Emitted launch scripts parse as bash, and no hostile value ran."""
    bash = shutil.which("bash")
    for script in [*folder.rglob("*.sh"), *folder.rglob("*.sbatch")]:
        if bash:
            done = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True)
            assert done.returncode == 0, (script, done.stderr)
    assert not list(folder.rglob("PWNED*")) and not Path("PWNED").exists()


@pytest.fixture(scope="module")
def exact_db(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("fuzz-study")
    made = runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b",
                               "16", "--storage", f"sqlite:///{base}/exact.db", "--study", "s", "--json"])
    assert made.exit_code == 0, made.output
    return base / "exact.db"


# The commands, each fuzzed by its own test (so that parallel test runners spread them) with its share of
# the budget; together at least FUZZ_EXAMPLES cases.
COMMANDS = ("search", "predict", "explain", "emit", "report", "validate", "calibrate", "tune", "worker", "catalog")


@pytest.mark.parametrize("command", COMMANDS)
def test_fuzz_every_command(command, plans_docs, exact_db, tmp_path_factory, capsys):
    stats = Stats()
    base = tmp_path_factory.mktemp(f"fuzz-{command}")
    started = time.perf_counter()

    def run_case(case: Case) -> None:
        folder = base / f"c{stats.invocations}"
        folder.mkdir()
        argv = materialise(case, folder, exact_db)
        t0 = time.perf_counter()
        result = runner.invoke(app, argv)
        stats.seconds[case.command] += time.perf_counter() - t0
        stats.invocations += 1
        stats.invalid += case.invalid
        stats.by_command[case.command] += 1
        stats.by_exit[result.exit_code] += 1
        shown = " ".join(a.replace(str(folder), "DIR") for a in argv)
        stats.log.append((shown, case.why, case.invalid, result.exit_code,
                          (result.stderr.strip().splitlines() or [""])[-1][:200]))
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            stats.tracebacks.append((shown, case.why, "".join(traceback.format_exception(
                type(result.exception), result.exception, result.exception.__traceback__))[-1500:]))
        elif "Traceback (most recent call last)" in result.output:
            stats.tracebacks.append((shown, case.why, result.output[-1500:]))
        elif case.invalid and result.exit_code == 0:
            stats.silent_accepts.append((shown, case.why, result.output[-400:]))
        elif case.invalid and result.exit_code != 2:
            stats.wrong_status.append((shown, case.why, result.exit_code, result.output[-400:]))
        if result.exit_code == 0 and case.command in ("emit", "search"):
            check_emitted_scripts(folder)
        shutil.rmtree(folder, ignore_errors=True)

    # A fixed number of cases, derandomized: the same every run.
    strategy, share = generators(plans_docs)[command]
    budget = max(1, round(FUZZ_EXAMPLES * share))

    @settings(max_examples=budget, derandomize=True, deadline=None, database=None, print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case: Case) -> None:
        run_case(case)

    run()
    wall = time.perf_counter() - started
    summary = {
        "command": command, "invocations": stats.invocations, "budget": budget, "marked_invalid": stats.invalid,
        "tracebacks": len(stats.tracebacks), "silent_accepts": len(stats.silent_accepts),
        "invalid_not_exit_2": len(stats.wrong_status), "wall_s": round(wall, 1),
        "by_exit_status": dict(stats.by_exit),
    }
    with capsys.disabled():
        print("\nfuzz:", json.dumps(summary))
    if os.environ.get("AUTOTUNE_FUZZ_REPORT"):
        # One JSON line per command, appended: the counts, the failures and every case.
        with open(os.environ["AUTOTUNE_FUZZ_REPORT"], "a") as handle:
            handle.write(json.dumps({**summary, "failures": {"tracebacks": stats.tracebacks,
                                                            "silent_accepts": stats.silent_accepts,
                                                            "wrong_status": stats.wrong_status},
                                     "cases": stats.log}, default=str) + "\n")
    problems = stats.tracebacks[:3] + stats.silent_accepts[:3] + stats.wrong_status[:3]
    assert not problems, json.dumps(problems, indent=1, default=str)
    # Hypothesis may stop short of max_examples only when a strategy runs out of distinct cases.
    assert stats.invocations >= 0.8 * budget, (stats.invocations, budget)


def test_the_budgets_add_up_to_the_promised_number_of_cases():
    shares = {name: share for name, (_, share) in generators({"train": {}, "serve": {}}).items()}
    assert set(shares) == set(COMMANDS)
    assert sum(max(1, round(FUZZ_EXAMPLES * s)) for s in shares.values()) * 0.8 >= min(FUZZ_EXAMPLES, 1000)
