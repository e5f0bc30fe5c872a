"""Sphinx configuration of opbench's documentation (Markdown pages through MyST).

`make docs` builds it with warnings as errors and nitpicky references: a link to a page or an
anchor that does not exist, or a page in no table of contents, fails the build.
"""

project = "opbench"
author = "the opbench developers"
copyright = "2026, the opbench developers"  # noqa: A001  (Sphinx's name)

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
myst_heading_anchors = 3  # `page.md#a-heading` links to headings down to ###
myst_enable_extensions = ["colon_fence"]
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "opbench"
