"""What every part of the report shares: the repository, where results and
docs live, the table markers, and the one error a marker can cause."""

from __future__ import annotations

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
RESULTS_DIR = os.path.join("docs", "results")
DOCS = ("README.md", os.path.join("docs", "*.md"),
        os.path.join("docs", "papers", "*.md"))

MARKER = re.compile(
    r"<!-- report: (?P<name>[\w.-]+)/(?P<table>[\w.-]+)(?P<opts>[^\n]*?)"
    r"\s*-->\n(?P<body>.*?)<!-- /report -->", re.S)
OPEN_MARKER = re.compile(r"<!-- report: ")
CLOSE_MARKER = re.compile(r"<!-- /report -->")


class ReportError(ValueError):
  """A marker that names a missing result, table, column or row."""


def md_escape(text: str) -> str:
  return str(text).replace("|", "\\|")
