"""The documentation builds strictly: `make docs` fails on a link to a missing page or anchor."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("sphinx-build", path=str(
    ROOT / ".venv" / "bin")) is None, reason="make and the project's .venv with sphinx-build are needed")


def _build(docs: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    # -o: the venv's stamp counts as up to date, so a test never reinstalls the environment
    return subprocess.run(["make", "-s", "-C", str(ROOT), "-o", ".venv/.installed", "docs", f"DOCS={docs}",
                           f"DOCS_OUT={tmp_path / 'html'}"], capture_output=True, text=True, check=False)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """The project's Sphinx configuration over three small pages, one linking another's heading: what makes
    `make docs` strict is its command and conf.py, and each build of every page took 4-6 s of make test."""
    copy = tmp_path / "docs"
    (copy / "explanation").mkdir(parents=True)
    (copy / "usage").mkdir()
    shutil.copy(ROOT / "docs" / "conf.py", copy / "conf.py")
    (copy / "index.md").write_text("# opbench\n\n```{toctree}\nexplanation/cost\nusage/compare\n```\n",
                                   encoding="utf-8")
    (copy / "usage" / "compare.md").write_text("# Compare\n\n## Side by side\n\nA section.\n", encoding="utf-8")
    (copy / "explanation" / "cost.md").write_text(
        "# Cost\n\nSee [side by side](../usage/compare.md#side-by-side).\n", encoding="utf-8")
    return copy


@pytest.mark.full  # make test builds the docs themselves (make docs), with this command
def test_the_docs_build_cleanly(tmp_path):
    result = _build(ROOT / "docs", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_small_copy_builds_cleanly(docs, tmp_path):
    """The failures below are the added mistake's alone."""
    result = _build(docs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("link, complaint", [
    ("[gone](nowhere.md)", "cross-reference target not found: 'nowhere.md'"),
    ("[gone](../usage/compare.md#no-such-heading)", "local id not found in doc 'usage/compare'"),
])
def test_a_broken_link_fails_the_build(docs, tmp_path, link, complaint):
    with (docs / "explanation" / "cost.md").open("a", encoding="utf-8") as page:
        page.write(f"\nSee {link}.\n")
    result = _build(docs, tmp_path)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_a_page_in_no_table_of_contents_fails_the_build(docs, tmp_path):
    (docs / "usage" / "orphan.md").write_text("# An orphan\n", encoding="utf-8")
    result = _build(docs, tmp_path)
    assert result.returncode != 0
    assert "document isn't included in any toctree" in result.stderr
