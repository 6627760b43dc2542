#!/usr/bin/env python
"""Parse router command lines with the routers' own argument definitions and validation (no launch).

Used by autotune CI, tests/test_emit_serving_engines.py (targets: vllm-router 0.1.17, sglang-router 0.3.2).

    check_router.py [--json] --batch FILE     # one command line per line (shell quoting; '#' comments)

A line starts with ``vllm-router`` or ``python -m sglang_router.launch_router``.  Each router's
``RouterArgs.add_cli_args`` builds the parser its ``launch_router`` builds, ``RouterArgs.from_cli_args``
reads and checks the values (worker URLs, PD prefill/decode lists and bootstrap ports); only the module
that holds them (``router_args``) is imported, so the router's server dependencies are not needed.
Abbreviated flags are refused (argparse would take an unambiguous prefix; an emitter must spell flags in full).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import shlex
import sys

LAUNCHERS = {("vllm-router",): "vllm_router", ("python", "-m", "sglang_router.launch_router"): "sglang_router",
             ("python3", "-m", "sglang_router.launch_router"): "sglang_router"}


def check(words: list[str]) -> dict:
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]
    for launcher, package in LAUNCHERS.items():
        if tuple(words[:len(launcher)]) == launcher:
            argv = words[len(launcher):]
            break
    else:
        return {"ok": False, "stage": "launcher", "error": f"unknown router launcher {words[:3]}"}
    module = importlib.import_module(f"{package}.router_args")
    parser = argparse.ArgumentParser(prog=package, allow_abbrev=False)
    module.RouterArgs.add_cli_args(parser, use_router_prefix=False)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit:
        lines = [x for x in err.getvalue().splitlines() if "error:" in x] or [err.getvalue().strip()]
        return {"ok": False, "stage": "argparse", "error": lines[-1]}
    try:
        ra = module.RouterArgs.from_cli_args(args, use_router_prefix=False)
    except Exception as e:  # the router's own validation
        return {"ok": False, "stage": "RouterArgs", "error": f"{type(e).__name__}: {e}"}
    out = {"ok": True, "router": package}
    for key in ("pd_disaggregation", "vllm_pd_disaggregation", "prefill_urls", "decode_urls", "worker_urls", "port"):
        if hasattr(ra, key):
            out[key] = getattr(ra, key)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="check_router.py")
    ap.add_argument("--batch", required=True)
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args(argv)
    with open(opts.batch) as f:
        commands = [c for c in (shlex.split(x, comments=True) for x in f) if c]
    bad = 0
    for words in commands:
        r = check(words)
        bad += not r["ok"]
        if opts.json:
            print(json.dumps({"command": shlex.join(words), **r}, default=str), flush=True)
        else:
            print(("OK " if r["ok"] else f"REJECTED at {r['stage']}: {r.get('error')}   ") + shlex.join(words), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
