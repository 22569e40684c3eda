"""docs/: the measured headline figures as data, and the pages that cite them. A row of
docs/data/measurements.csv is a figure someone will quote: it names its GPU, its date (ISO) and
its torch, and the lesson or tool it names exists; its page exists, cites it by quantity and
holds the value the row gives. The index (docs/README.md) lists every page, every relative link
in docs/ resolves, and every docs page that the code, the README or the fixtures name exists,
with the section they quote."""

from __future__ import annotations

import csv
import datetime
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CSV = DOCS / "data" / "measurements.csv"
COLUMNS = ["gpu", "date", "torch", "triton", "lesson_or_tool", "quantity", "value", "unit",
           "source_page", "note"]  # fmt: skip
VALUE = re.compile(r"\d+(\.\d+)?(-\d+(\.\d+)?)?")  # a number, or a range "lo-hi"
SKIP = {".venv", ".git", "traces", "__pycache__", ".ruff_cache", ".gpu"}
# `docs/kernel_lab.md, "auto"`, `docs/lessons/08_generate.md ("Fourth pass")`, and in the pages
# [`docs/measuring.md`](../measuring.md), "Small shapes": a page, then the section it quotes
QUOTED = re.compile(r'docs/([\w/]+\.md)`?(?:\]\([^)]*\))?(?:,| \()\s*"([^"]+)"')


def rows() -> list[dict[str, str]]:
    with CSV.open(newline="") as f:
        return list(csv.DictReader(f))


def test_the_csv_has_its_columns():
    with CSV.open(newline="") as f:
        assert next(csv.reader(f)) == COLUMNS
    assert len(rows()) > 50


def test_every_row_names_its_gpu_date_and_versions():
    for row in rows():
        where = row["quantity"]
        assert row["gpu"].strip() and row["torch"].strip() and row["unit"].strip(), where
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"]), where
        datetime.date.fromisoformat(row["date"])
        assert VALUE.fullmatch(row["value"]), where
        low, _, high = row["value"].partition("-")
        assert float(low) <= float(high or low), where
        if row["lesson_or_tool"].endswith((".py", ".sh")):  # a file: where it is now
            assert (ROOT / row["lesson_or_tool"]).is_file(), (where, row["lesson_or_tool"])


def test_each_figure_is_one_row():
    keys = [(row["gpu"], row["quantity"]) for row in rows()]
    assert len(keys) == len(set(keys))


def test_every_row_is_cited_by_its_page_with_its_value():
    for row in rows():
        page = ROOT / row["source_page"]
        assert page.is_file() and DOCS in page.parents, row["source_page"]
        text = page.read_text()
        assert f"`{row['quantity']}`" in text, (row["source_page"], row["quantity"])
        # the pages write 17,479 MiB, the row 17479
        assert row["value"] in text.replace(",", ""), (row["source_page"], row["quantity"])


def test_the_index_lists_every_page():
    index = (DOCS / "README.md").read_text()
    for page in DOCS.rglob("*.md"):
        if page != DOCS / "README.md":
            assert f"]({page.relative_to(DOCS).as_posix()})" in index, page


def test_every_relative_link_in_the_docs_resolves():
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if "://" not in target and not target.startswith("#"):
                assert (page.parent / target.split("#")[0]).exists(), (page, target)


def headings(page: Path) -> str:
    return "\n".join(line for line in page.read_text().splitlines() if line.startswith("#"))


def test_every_docs_page_the_repository_names_exists_with_its_section():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP]
        for name in files:
            if not name.endswith((".py", ".md", ".sh", ".json", ".toml")):
                continue
            path = Path(folder, name)
            # a quote broken over lines: the comment's `#` or the docstring's indent between
            text = re.sub(r"\n\s*(#\s*)?", " ", path.read_text(errors="replace"))
            for page in set(re.findall(r"\bdocs/([\w/]+\.md)", text)):
                assert (DOCS / page).is_file(), (path, page)
            for page, section in QUOTED.findall(text):
                assert section in headings(DOCS / page), (path, page, section)


# `tools/dev/ranks/link_curve.py`, `python -m tools.tp_scaling`: a tool the pages tell to run
TOOL_FILE = re.compile(r"\btools/[\w/]+\.py\b")
TOOL_MODULE = re.compile(r"\bpython3? -m (tools(?:\.\w+)+)")


def test_every_tool_the_docs_and_the_fixtures_cite_exists():
    pages = [*DOCS.rglob("*.md"), ROOT / "tests" / "fixtures" / "README.md"]
    for page in pages:
        text = page.read_text()
        cited = TOOL_FILE.findall(text)
        cited += [m.replace(".", "/") + ".py" for m in TOOL_MODULE.findall(text)]
        for tool in cited:
            assert (ROOT / tool).is_file(), (page.relative_to(ROOT).as_posix(), tool)
