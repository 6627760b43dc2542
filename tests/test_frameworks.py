"""Framework profiles: loading, NAME@VERSION resolution, and refusal of bad profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.errors import InputError
from autotune.inputs.framework import (
    DEFAULT_FRAMEWORK,
    TRAITS,
    framework_for_run,
    framework_names,
    load_framework,
    load_profile,
    parse_framework_spec,
)

BUNDLED = ("deepspeed", "llm-foundry", "megascale", "megatron-bridge", "megatron-deepspeed", "megatron-lm", "nemo",
           "other", "torchtitan")
PROFILE_DIR = Path(__file__).resolve().parent.parent / "profiles" / "frameworks"


def test_every_framework_of_the_issue_is_bundled_and_loads():
    assert tuple(framework_names()) == BUNDLED
    for name in BUNDLED:
        profile = load_profile(name)
        newest = profile.at()
        assert newest.name == name and newest.version == ""
        # Every trait carries a source, in the profile and after every change.
        assert set(newest.sources) == set(TRAITS)
        assert all(newest.sources[t].strip() for t in TRAITS)


def test_versions_resolve_to_the_behaviour_of_their_date():
    old = load_framework("megatron-lm@2021-04")
    new = load_framework("megatron-lm@2024-07")
    assert old.attention == "unfused" and old.dropout and old.tp_overlap_nvlink == 0.0 and old.dp_overlap == 0.0
    assert old.selective_recompute == "none" and old.zero_stages == (0,)
    assert new.attention == "cudnn" and new.tp_overlap_nvlink > 0.5 and new.dp_overlap > 0.5
    assert new.zero_stages == (0, 1) and "cp" in new.parallel_dims
    assert load_framework("megatron-lm@2022-05").selective_recompute == "core_attention"
    assert load_framework("megatron-lm").uneven_stages and not new.uneven_stages
    # A NeMo container tag is a release named in the profile.
    assert load_framework("nemo@24.07").date == "2024-07"
    assert load_framework("torchtitan@2024-12").pipeline_runtime == "torch"
    assert load_framework("deepspeed@2021-04").zero3_collectives == "submodule"


def test_the_default_framework_is_documented_and_newest():
    assert load_framework() == load_framework(DEFAULT_FRAMEWORK)
    assert load_framework().label == f"{DEFAULT_FRAMEWORK} (newest profiled)"
    assert load_framework("nemo@24.07").label == "nemo@24.07"
    # An empty framework cell in a runs CSV means the default.
    assert framework_for_run("", "") == load_framework()


@pytest.mark.parametrize("spec", ["", "@2024-07", "megatron-lm@", "  "])
def test_a_malformed_spec_is_refused(spec):
    with pytest.raises(InputError, match="NAME\\[@VERSION\\]"):
        parse_framework_spec(spec)


def test_unknown_names_and_versions_are_refused_with_the_known_ones():
    with pytest.raises(InputError, match="unknown framework 'jax'.*megatron-lm"):
        load_framework("jax")
    with pytest.raises(InputError, match="unknown version 'v9' of nemo.*24.07"):
        load_framework("nemo@v9")
    with pytest.raises(InputError, match="unknown version '2024-13'"):
        load_framework("torchtitan@2024-13")


def _profile(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load((PROFILE_DIR / "other.yaml").read_text())
    edit(data)
    path = tmp_path / "fw.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("edit", "field", "message"), [
    (lambda d: d["traits"].update(attentoin="flash"), None, "unknown key.*traits.attentoin"),
    (lambda d: d["traits"].update(attention="triton"), "traits.attention", "must be one of unfused, flash, cudnn"),
    (lambda d: d["traits"].update(dp_overlap=1.5), "traits.dp_overlap", "0 <= value <= 1"),
    (lambda d: d["traits"].update(zero_stages=[0, 4]), "traits.zero_stages", "distinct values"),
    (lambda d: d["traits"].update(dropout="no"), "traits.dropout", "true or false"),
    (lambda d: d["traits"].pop("logits_bytes"), "traits", "missing logits_bytes"),
    (lambda d: d["sources"].pop("attention"), "sources.attention", "needs a source"),
    (lambda d: d.update(changes=[{"since": "2024-1", "traits": {}, "source": "x"}]), "changes[0].since", "YYYY-MM"),
    (lambda d: d.update(changes=[{"since": "2024-01", "traits": {"dp_overlap": 0.1}}]), "changes[0].source",
     "source of the change"),
    (lambda d: d.update(changes=[{"since": "2025-01", "traits": {}, "source": "a"},
                                 {"since": "2024-01", "traits": {}, "source": "b"}]), "changes", "date order"),
    (lambda d: d.update(colour="red"), None, "unknown key.*colour"),
])
def test_a_bad_profile_names_its_file_and_field(tmp_path, edit, field, message):
    path = _profile(tmp_path, edit)
    with pytest.raises(InputError, match=message) as info:
        load_framework(str(path))
    assert str(path) in str(info.value)
    if field:
        assert info.value.field == field


def test_a_profile_given_by_path_loads(tmp_path):
    path = _profile(tmp_path, lambda d: d["traits"].update(dp_overlap=0.25))
    assert load_framework(str(path)).dp_overlap == 0.25
    assert load_framework(f"{path}@2024-07").date == "2024-07"
