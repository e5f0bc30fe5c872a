"""The HTML report as a person sees it: rendered by a real headless browser (Debian's chromium,
which `make test` installs), its tables and every image decoded, and a screenshot that shows
the plots' colours. Skipped, with the reason, only where no chromium is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from ..helpers import bench, write

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
TAB_BLUE = np.array([31, 119, 180]) / 255  # matplotlib's first colour: the first column's bars and lines

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (make test installs Debian's chromium)")


def _runs(folder):
    """Two runs of GEMM at two sizes in two frameworks, and a model; one result timed busy."""
    def run(name: str, scale: float) -> str:
        benches = []
        for size in (256, 1024):
            group = f"gemm-forward[cpu-float32-{size}x{size}x{size}]"
            shape = f"{size}x{size}x{size}"
            for framework, t in (("numpy", 2e-10), ("torch", 1.5e-10)):
                benches.append(bench(f"test_gemm[{framework}-cpu-eager-float32-{shape}]", t * size**3 * scale, group,
                                     framework=framework, flops=2 * size**3, op="gemm", direction="forward",
                                     shape=shape))
        benches.append(bench("test_training[torch-cpu-eager-float32-mlp-b128]", 1e-3 * scale,
                             "mlp-training[cpu-float32-mlp-b128]", flops=None, model="mlp", direction="training",
                             shape="mlp-b128", peak_rss_bytes=300 * 2**20,
                             load={"other_cpus": 1.8, "steal": 0.0, "run_queue": 5, "cpus": 2, "team": 2,
                                   "wall_s": 1.0, "busy": True}))
        return str(write(folder / name, benches))

    return [run("a.json", 1.0), run("b.json", 1.04)]


def _chromium(*args: str, user_dir) -> str:
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={user_dir}", *args], capture_output=True, text=True,
                          timeout=120, check=False)  # bounds a hang; a page this size renders in about a second
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_html_report_renders_its_tables_and_plots_in_a_real_browser(tmp_path):
    page = tmp_path / "report" / "index.html"
    made = subprocess.run([sys.executable, "-m", "opbench", "report", *_runs(tmp_path), "--html", str(page)],
                          capture_output=True, text=True, check=False, timeout=300)
    assert made.returncode == 0, made.stderr

    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", page.as_uri(), user_dir=tmp_path / "profile")
    tables = re.findall(r"<table>.*?</table>", dom, re.S)
    assert len(tables) >= 5 and all(t.count("<tr>") >= 2 for t in tables)
    images = re.findall(r"<img [^>]*>", dom)
    assert len(images) >= 3, "bars, scaling and training-step plots"
    decoded = [int(m) for img in images for m in re.findall(r'data-decoded="(\d+)"', img)]
    assert len(decoded) == len(images) and min(decoded) >= 800, images[0][-200:]
    assert "data-broken" not in dom
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", dom, re.S)
    assert len(captions) == len(images) and not any("From run" in c for c in captions), captions[:2]  # drawn once
    assert "runs and environment" in dom and "CPU cpu" in dom and "torch 2.13.0" in dom
    assert "1 timed on a busy machine" in dom and " !</td>" in dom  # the busy result is marked
    assert "median of its runs' medians" in dom  # the combining rule is stated

    shot = tmp_path / "shot.png"
    _chromium("--window-size=1280,6000", f"--screenshot={shot}", page.as_uri(), user_dir=tmp_path / "profile")
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    blue = np.all(np.abs(pixels - TAB_BLUE) < 0.03, axis=-1).sum()
    # the first column's markers (about 9 px across at the plots' 110 dpi), error bars and lines: a
    # plot that did not render leaves none (the tables draw no blue), a rendered one hundreds
    assert blue > 100 * len(images), f"only {blue} pixels of the first column's colour: the plots did not render"
    assert (pixels.mean(axis=-1) < 0.5).sum() > 5000, "hardly any dark pixels: the tables' text did not render"
