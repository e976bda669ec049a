"""Hostile strings (environment names, image names, log tails) come out inert in HTML and Markdown."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from runner.report import compare_command, report_command
from runner.report.fmt import md_code_block, md_escape
from tests.report.conftest import fill_store, load_results

EVIL_ENV = 'evil|env <script>alert(1)</script> "q" \'s\' `tick` $x$'
EVIL_IMAGE = "registry|example/<img src=x onerror=alert(2)>:latest"
EVIL_LOG = "Traceback\n<script>alert(3)</script>\n| a | b |\n```\nbreak out of the fence\n"


def hostile(data: dict[str, Any]) -> dict[str, Any]:
    env = data["environments"].pop("cluster-pt041")
    env["env"]["image"] = EVIL_IMAGE
    env["env"]["device_name"] = "GPU|<b>bold</b>"
    data["environments"][EVIL_ENV] = env
    for r in data["results"]:
        if r["environment"] == "cluster-pt041":
            r["environment"] = EVIL_ENV
            if r["status"] != "ok":
                r["log_tail"] = EVIL_LOG
                r["reason"] = "reason with | pipe and <script>alert(4)</script>"
    return data


@pytest.fixture(scope="module")
def evil_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("evil")
    db = fill_store(tmp / "results.db", hostile(load_results()))
    out = tmp / "evil"
    report_command(db, None, ["md", "html"], out)
    return db, out


def unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def md_tables(text: str) -> list[list[str]]:
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables + ([current] if current else [])


def test_html_never_contains_raw_markup_from_data(evil_report: tuple[Path, Path]) -> None:
    from runner.report import charts

    html = (evil_report[1] / "report.html").read_text()
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S | re.I)
    assert len(scripts) >= 3 and html.lower().count("<script") == len(scripts)
    for attrs, body in scripts:   # only the Vega bundle, the page's own script, and charts' specs with < > & escaped
        if attrs.startswith(' type="application/json"'):
            assert not re.search("[<>&]", body) and "\\u003cscript\\u003e" in html
        else:
            assert attrs == "" and body.strip() in (charts.bundle().strip(), charts.EMBED.strip())
    html = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)
    assert "<script" not in html.lower()
    assert "<img" not in html and "<b>bold</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html      # shown, as text
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in html      # the log tail too


def test_markdown_tables_keep_their_shape(evil_report: tuple[Path, Path]) -> None:
    md = (evil_report[1] / "report.md").read_text()
    prose = re.sub(r"^(`{3,})text\n.*?^\1$", "", md, flags=re.S | re.M)  # code blocks show text verbatim
    assert "<script>" not in prose and "<img" not in prose and "<b>" not in prose
    tables = md_tables(md)
    assert tables
    for table in tables:
        width = unescaped_pipes(table[0])
        assert all(unescaped_pipes(line) == width for line in table), table
    assert r"evil\|env" in md


def test_log_tail_cannot_break_out_of_its_code_block(evil_report: tuple[Path, Path]) -> None:
    md = (evil_report[1] / "report.md").read_text()
    block = md_code_block(EVIL_LOG)
    assert block in md
    assert block.startswith("````text\n") and block.endswith("\n````")


def test_compare_markdown_escapes_side_names(evil_report: tuple[Path, Path]) -> None:
    text = compare_command(evil_report[0], "ngc-18.07", EVIL_ENV, "md")
    assert "<script>" not in text
    for table in md_tables(text):
        width = unescaped_pipes(table[0])
        assert all(unescaped_pipes(line) == width for line in table)


@pytest.mark.parametrize(("raw", "escaped"), [
    ("a|b", r"a\|b"),
    ("<script>x</script>", "&lt;script>x&lt;/script>"),
    ("`code`", r"\`code\`"),
    ("line\nbreak", "line break"),
    ("# heading", r"\# heading"),
    ("cifar_vgg16", "cifar_vgg16"),
    ("p < 0.05", "p < 0.05"),
    ("[link](javascript:x)", r"\[link\](javascript:x)"),
    ("$x^2$ ~~gone~~", r"\$x^2\$ \~\~gone\~\~"),
])
def test_md_escape(raw: str, escaped: str) -> None:
    assert md_escape(raw) == escaped
