"""``replicate --report`` puts text read from a summary into a Markdown page: every such string shows as itself,
never as a link, an image, an HTML tag, an attribute, a heading, a code span or a new table cell."""

from __future__ import annotations

import json
import re

import markdown
import pytest
from test_claim_rules import dim_seeds
from test_items import _record

from st_magnitude.lab.replication.markdown import md_code, md_text
from st_magnitude.lab.replication.report import render_report
from st_magnitude.lab.replication.runner import summary

HOSTILE = (
    'x | y\n## heading <script>alert(1)</script> `c` [l](http://e) ![i](http://e/i.png) {: onclick="z" } *em* &amp;'
)
#: the page's own Markdown extensions that could turn text into markup
EXTENSIONS = ["tables", "attr_list"]


def _results(tmp_path, hostile: str | None):
    record = summary(_record("003", dim_seeds(lambda d: 5.3), fit_bootstrap=0))
    record["machine"] = {"gpu": "G", "torch": "2"}
    record["verdict"] = record["decision"]["verdict"]
    record["command"] = "st-magnitude replicate 003"
    if hostile is not None:
        d = record["decision"]
        record["command"] = f"st-magnitude replicate 003 {hostile}"
        record["machine"] = {"gpu": hostile, "torch": hostile}
        record["verdict"] = d["verdict"] = hostile
        record["verdict_rule_when_run"] = hostile
        record["settings"]["train_data"] = hostile
        d["note"] = d["ours"] = d["judged_from"] = hostile
        d["statements"][0]["name"] = d["statements"][0]["tests"] = hostile
        d["gates"][0]["reason"] = hostile
        comparison = next(iter(d["comparisons"].values()))
        comparison["metric"] = comparison["arm_a"] = comparison["arm_b"] = hostile
    folder = tmp_path / ("hostile" if hostile else "plain")
    folder.mkdir()
    (folder / "003-cpu.json").write_text(json.dumps(record), encoding="utf-8")
    (folder / "not_run.json").write_text(json.dumps({"001/cpu": hostile or "skipped"}), encoding="utf-8")
    return folder


def _tables(html: str) -> list[list[int]]:
    """Per table, the number of cells in each row."""
    return [
        [len(re.findall(r"<t[dh][ >]", row)) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
        for table in re.findall(r"<table>(.*?)</table>", html, re.S)
    ]


def test_summary_text_shows_as_itself_in_the_page(tmp_path):
    plain = markdown.markdown(render_report(_results(tmp_path, None)), extensions=EXTENSIONS)
    page = render_report(_results(tmp_path, HOSTILE))
    html = markdown.markdown(page, extensions=EXTENSIONS)
    assert "<script" not in html and not re.search(r"<[^>]*onclick", html) and "<h2>heading" not in html
    for tag in ("<a ", "<img", "<code>", "<em>", "<h2"):
        assert html.count(tag) == plain.count(tag), tag  # none added by the hostile text
    assert [len(set(rows)) for rows in _tables(html)] == [1] * len(_tables(html))  # no cell added to any row
    assert [rows[0] for rows in _tables(html)] == [rows[0] for rows in _tables(plain)]
    assert "alert(1)" in html and "&lt;script&gt;" in html  # still shown, as text


@pytest.mark.parametrize("text", [HOSTILE, "plain", "``a`b``", "`", "a\u2028b\rc"])
def test_the_escapes_render_back_to_the_text_on_one_line(text):
    one_line = " ".join(text.split())
    html = markdown.markdown(f"| a |\n| --- |\n| {md_text(text)} |", extensions=EXTENSIONS)
    cell = re.search(r"<td>(.*)</td>", html, re.S).group(1)
    assert cell.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&") == one_line
    code = markdown.markdown(f"- {md_code(text)}", extensions=EXTENSIONS)
    span = re.search(r"<code>(.*)</code>", code, re.S).group(1)
    assert span.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") == one_line
