"""report.html: one file that loads nothing from anywhere and shows the tables and plots."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

import pytest

from tuner.results import load_results
from tuner.results.html import render_html
from tuner.results.plots import render_plots
from tuner.testing.sample import write_sample_study


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[tuple[str, str, str]] = []
        self.cells: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._in_cell = tag == "td"
        for name, value in attrs:
            if name in ("src", "href", "srcset", "action", "data", "poster"):
                self.refs.append((tag, name, value or ""))

    def handle_data(self, data: str) -> None:
        if self._in_cell:
            self.cells.append(data)
            self._in_cell = False


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, bytes]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('html') / 'study.db'}"
    write_sample_study(url)
    results = load_results(url)
    pngs = render_plots(results)
    return render_html(results, pngs), pngs


def test_page_is_self_contained(page: tuple[str, dict[str, bytes]]) -> None:
    html, pngs = page
    parser = _Refs()
    parser.feed(html)
    assert "script" not in parser.tags and "link" not in parser.tags
    assert len(parser.refs) == len(pngs) == 5
    for tag, name, value in parser.refs:
        assert (tag, name) == ("img", "src")
        assert value.startswith("data:image/png;base64,")
    assert not re.search(r"url\(|@import|https?://", html)


def test_inlined_images_are_the_rendered_pngs(page: tuple[str, dict[str, bytes]]) -> None:
    html, pngs = page
    parser = _Refs()
    parser.feed(html)
    inlined = [base64.b64decode(v.split(",", 1)[1]) for _, _, v in parser.refs]
    assert inlined == list(pngs.values())


def test_page_shows_the_table_cells(page: tuple[str, dict[str, bytes]]) -> None:
    html, _ = page
    parser = _Refs()
    parser.feed(html)
    assert "752 [730, 770]" in parser.cells
    assert "Engine core died" in parser.cells
    assert "<title>tuner report: sample</title>" in html
