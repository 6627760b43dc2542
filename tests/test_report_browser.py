"""The HTML report in a real browser: headless Chromium opens it, no console message, every figure decoded.

Marked ``browser``; skipped when no chromium is installed (Debian: ``apt-get install -y chromium``).
Chromium's own headless flags do the work (no Python browser driver): ``--dump-dom`` returns the page
after its load handler marked how many figures decoded, ``--enable-logging=stderr --v=0`` prints every
console message as a ``CONSOLE`` line, and ``--screenshot`` saves what a person would see.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from autotune.cli import app

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
# CI installs Chromium and sets AUTOTUNE_REQUIRE_BROWSER=1, so there a missing browser fails the test.
REQUIRED = os.environ.get("AUTOTUNE_REQUIRE_BROWSER") == "1"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None and not REQUIRED,
                       reason="chromium is not installed (Debian: apt-get install -y chromium)"),
]
runner = CliRunner()
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--no-first-run", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"]


@pytest.fixture(scope="module")
def report_html(tmp_path_factory):
    assert CHROMIUM is not None, "chromium is required here (AUTOTUNE_REQUIRE_BROWSER=1) but not installed"
    base = tmp_path_factory.mktemp("browser")
    args = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16"]
    assert runner.invoke(app, ["search", *args, "--out", str(base / "run")]).exit_code == 0
    made = runner.invoke(app, ["report", str(base / "run" / "plans.json"), "--out", str(base / "rep"), "--trials", "30"])
    assert made.exit_code == 0, made.output
    return base / "rep" / "report.html"


def _chromium(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(cwd)}  # chromium writes its profile under HOME
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={cwd / 'profile'}", *args], check=False, capture_output=True,
                          text=True, timeout=90, cwd=cwd, env=env)


def test_report_renders_in_chromium_without_console_errors(report_html):
    run = _chromium("--dump-dom", report_html.as_uri(), cwd=report_html.parent)
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line]
    assert not console, "console messages:\n" + "\n".join(console)
    total = re.search(r'data-figures-total="(\d+)"', run.stdout)
    rendered = re.search(r'data-figures-rendered="(\d+)"', run.stdout)
    assert total and rendered, "the page's load handler did not run"
    assert int(total.group(1)) == 6 and rendered.group(1) == total.group(1)


def test_report_screenshot(report_html):
    shot = report_html.parent / "screenshot.png"
    run = _chromium(f"--screenshot={shot}", "--window-size=1200,2200", report_html.as_uri(), cwd=report_html.parent)
    assert run.returncode == 0, run.stderr[-2000:]
    from test_report import check_png

    check_png(shot, min_bytes=20_000)
    target = os.environ.get("AUTOTUNE_SCREENSHOT_DIR")
    if target:  # CI keeps the screenshot as an artifact
        shutil.copy(shot, os.path.join(target, "report-screenshot.png"))
