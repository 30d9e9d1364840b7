"""One self-contained HTML page: the summary table and the figures.

Images are inlined as ``data:image/png;base64,...`` URIs and the style sheet sits
in the page, so the file references nothing outside itself (no network, no other
files): it can be mailed or attached to a ticket as it is.
"""
from __future__ import annotations

import base64
from html import escape

from procmap.textfmt import num

from .data import ReportData

_STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
img { max-width: 100%; display: block; margin: 0.5em 0 2em 0; }
.note { color: #555; font-size: 0.9em; }
"""


def _num(value) -> str:
    """A summary value as HTML text: numbers as the text reports print them."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return escape(num(value))
    return escape(str(value))


def _percent(share: float) -> str:
    return f"{100 * share:.1f}%"


def summary_table(data: ReportData) -> str:
    """HTML tables: the run (engine, seed, time, machine) and every placement's J,
    cut, share between nodes and procmap's improvement over it."""
    s = data.summary
    seconds = s.get("seconds")
    run_rows = [("graph", s.get("graph")), ("tasks", s["tasks"]), ("edges", s["edges"]),
                ("hierarchy", s["hierarchy"]), ("distance", s["distance"]),
                ("PEs / nodes", f"{s['pes']:,} / {s['nodes']:,}"), ("mode", s["mode"]),
                ("engine", s.get("engine")), ("seed", s.get("seed")),
                ("time", None if seconds is None else f"{seconds:.3f} s")]
    run = "".join(f"<tr><th>{escape(k)}</th><td>{_num(v)}</td></tr>"
                  for k, v in run_rows if v is not None)
    head = ("<tr><th>placement</th><th>J</th><th>edge cut</th><th>between nodes</th>"
            f"<th>{escape(data.mapped)} vs it</th></tr>")
    rows = []
    for name, row in s["placements"].items():
        gain = s["improvement"].get(name)
        versus = "&mdash;" if gain is None else (
            f"{_percent(gain)} lower J" if gain >= 0 else f"{_percent(-gain)} higher J")
        flag = "" if row["valid"] else " (over capacity)"
        rows.append(f"<tr><td>{escape(name)}{flag}</td><td>{_num(row['J'])}</td>"
                    f"<td>{_num(row['cut'])}</td><td>{_percent(row['off_node_share'])}</td>"
                    f"<td>{versus}</td></tr>")
    return (f"<table>{run}</table>\n<table>{head}{''.join(rows)}</table>\n"
            "<p class=\"note\">J = sum over ordered pairs C_ij &middot; D(pe_i, pe_j): every "
            "undirected edge counts twice. The edge cut counts each cut edge once.</p>")


def page(data: ReportData, images: dict[str, bytes], titles: dict[str, str]) -> str:
    """The whole HTML document; ``images`` maps a figure name to its PNG bytes."""
    figures = []
    for name, png in images.items():
        uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        title = escape(titles.get(name, name))
        figures.append(f"<h2>{title}</h2>\n<img alt=\"{title}\" src=\"{uri}\">")
    graph = escape(str(data.summary.get("graph", "")))
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>procmap report {graph}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
            f"<h1>procmap report: {graph}</h1>\n{summary_table(data)}\n"
            + "\n".join(figures) + "\n</body>\n</html>\n")
