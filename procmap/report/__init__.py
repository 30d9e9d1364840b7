"""``procmap report``: figures and an HTML page comparing placements.

* :mod:`procmap.report.data` computes what the figures show (NumPy only, no
  matplotlib): the aggregated traffic matrix, traffic per hierarchy level and the
  per-node view, plus the summary numbers. :meth:`ReportData.as_dict` is the JSON.
* :mod:`procmap.report.figures` draws them with matplotlib's Agg backend (the
  optional extra ``procmap[report]``).
* :mod:`procmap.report.html` puts the summary table and the PNGs, inlined as base64
  data URIs, into one self-contained HTML file.

Nothing is imported here, so ``procmap.report.data`` stays usable without matplotlib.
"""
