"""The report's figures, drawn with matplotlib's Agg backend (no display needed).

matplotlib is the optional extra ``procmap[report]``; :func:`require_matplotlib`
turns its absence into one :class:`~procmap.errors.ProcmapError` line naming the
install command. Figures are built as ``matplotlib.figure.Figure`` objects, never
through ``pyplot``: no global state, no backend selection, nothing left open.
"""
from __future__ import annotations

import io

import numpy as np

from procmap.errors import ProcmapError
from procmap.textfmt import num

from .data import LevelTraffic, NodeTraffic, ReportData, TrafficMatrix, group_name

INSTALL_HINT = "pip install -e '.[report]' in a procmap checkout"
#: Resolution of the PNGs (dots per inch); the figure sizes below are in inches.
DPI = 100
# One colour per placement, the same in every figure; procmap's own is orange.
_COLOURS = {"block": "#9e9e9e", "roundrobin": "#56b4e9", "random": "#cc79a7"}
_MAPPED = "#e69f00"


def require_matplotlib() -> None:
    """Raise a one-line :class:`ProcmapError` when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ProcmapError(f"procmap report needs matplotlib: {INSTALL_HINT}") from None


def _figure(width: float, height: float):
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes (no metadata: the same figure gives the same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def colours(names) -> dict[str, str]:
    """Colour of every placement: a baseline's own, else procmap's."""
    return {name: _COLOURS.get(name, _MAPPED) for name in names}


# ------------------------------------------------------------ the matrix
def _axis_label(m: TrafficMatrix) -> str:
    if m.unit == "rank":
        return "ranks, ordered by PE"
    if m.unit == "PE":
        return "PEs"
    return f"PEs, in groups of {m.group}"


#: Largest side of a heatmap as drawn, in cells: about the axis width in pixels, so
#: that every cell gets a pixel (matplotlib's own resampling of a larger, mostly
#: empty matrix would drop isolated cells).
DRAWN_CELLS = 384
#: Boundaries of a level are drawn only when there are at most this many.
DRAWN_LINES = 64


def _pool(values: np.ndarray, factor: int) -> np.ndarray:
    """Sum ``factor`` x ``factor`` blocks (zero-padded at the end); volume is kept."""
    if factor == 1:
        return values
    side = -(-values.shape[0] // factor)
    padded = np.zeros((side * factor, side * factor), dtype=values.dtype)
    padded[:values.shape[0], :values.shape[1]] = values
    return padded.reshape(side, factor, side, factor).sum(axis=(1, 3))


def traffic_matrix_figure(data: ReportData, hierarchy):
    """Heatmaps of rank-to-rank traffic under block and procmap's placement, on one
    colour scale (logarithmic when the volumes span more than a factor 10); grid
    lines mark processor and node boundaries; white cells carry no traffic."""
    import matplotlib
    from matplotlib.collections import LineCollection
    from matplotlib.colors import LogNorm, Normalize

    names = list(data.matrices)
    factor = max(1, -(-max(m.cells for m in data.matrices.values()) // DRAWN_CELLS))
    pooled = {name: _pool(m.values, factor) for name, m in data.matrices.items()}
    positive = [p[p > 0] for p in pooled.values()]
    positive = [p for p in positive if p.size]
    fig = _figure(5.0 * len(names) + 1.2, 5.4)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    cmap = matplotlib.colormaps["viridis_r"].with_extremes(bad="white")
    lo = min((float(p.min()) for p in positive), default=1.0)
    hi = max((float(p.max()) for p in positive), default=1.0)
    logarithmic = hi > 10 * lo
    norm = LogNorm(vmin=lo, vmax=hi) if logarithmic else Normalize(vmin=0, vmax=hi)
    image = None
    for ax, name in zip(axes, names):
        m = data.matrices[name]
        side, drawn = m.cells, pooled[name].shape[0] * factor
        image = ax.imshow(np.ma.masked_less_equal(pooled[name], 0), cmap=cmap, norm=norm,
                          extent=(0, drawn, drawn, 0), interpolation="nearest")
        shown = {t: pos for t, pos in m.lines.items() if t > 0 and pos.size <= DRAWN_LINES}
        top = max(shown, default=0)
        for t, pos in sorted(shown.items()):
            segs = [[(x, 0), (x, side)] for x in pos] + [[(0, y), (side, y)] for y in pos]
            # the highest level drawn (nodes, usually) stands out, lower ones stay faint
            strong = t == top
            ax.add_collection(LineCollection(segs, colors="black",
                                             linewidths=0.9 if strong else 0.4,
                                             alpha=0.8 if strong else 0.25,
                                             label=f"{group_name(hierarchy, t)} boundary"))
        ev = data.evaluations[name]
        ax.set_title(f"{name}: J = {num(ev.J)}")
        ax.set_xlabel(f"receiver ({_axis_label(m)})")
        ax.set_ylabel(f"sender ({_axis_label(m)})")
        ax.set_xlim(0, side)
        ax.set_ylim(side, 0)
    if image is not None:
        label = "volume per cell" + (" (log scale)" if logarithmic else "")
        fig.colorbar(image, ax=list(axes), shrink=0.85, label=label)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=len(handles),
                   frameon=False, fontsize="small")
    return fig


# ---------------------------------------------------------------- levels
def level_figure(levels: LevelTraffic):
    """Grouped bars: traffic per hierarchy level for every placement; the legend gives
    the share that crosses nodes."""
    names = list(levels.volumes)
    fig = _figure(max(6.0, 1.6 * len(levels.names) + 2.0), 4.2)
    ax = fig.subplots()
    x = np.arange(len(levels.names))
    width = 0.8 / max(1, len(names))
    for i, (name, colour) in enumerate(colours(names).items()):
        share = levels.off_node_share(name)
        ax.bar(x + (i - (len(names) - 1) / 2) * width, levels.volumes[name], width,
               color=colour, label=f"{name}: {100 * share:.1f}% between nodes")
    if levels.first_off_node < len(levels.names):
        ax.axvspan(levels.first_off_node - 0.5, len(levels.names) - 0.5, color="#d62728",
                   alpha=0.07, zorder=0)
    ax.set_xticks(x, levels.names)
    ax.set_ylabel("traffic volume (both directions)")
    ax.set_title("Traffic per hierarchy level")
    ax.legend(frameon=False)
    return fig


# ----------------------------------------------------------------- nodes
def node_figure(nodes: NodeTraffic):
    """Per node (or group of nodes): traffic sent off-node, and load against capacity."""
    names = list(nodes.off_node)
    fig = _figure(max(6.5, min(14.0, 0.12 * nodes.capacity.size + 4.0)), 6.0)
    top, bottom = fig.subplots(2, 1, sharex=True)
    x = np.arange(nodes.capacity.size)
    width = 0.8 / max(1, len(names))
    palette = colours(names)
    for i, name in enumerate(names):
        offset = (i - (len(names) - 1) / 2) * width
        top.bar(x + offset, nodes.off_node[name], width, color=palette[name], label=name)
        bottom.bar(x + offset, nodes.load[name], width, color=palette[name], label=name)
    bottom.step(np.append(x, x[-1] + 1) - 0.5, np.append(nodes.capacity, nodes.capacity[-1]),
                where="post", color="black", linewidth=1.2, label="capacity")
    what = "node" if nodes.group == 1 else f"group of {nodes.group} nodes"
    top.set_title(f"Per {what}: traffic sent to other nodes")
    top.set_ylabel("volume sent off-node")
    top.legend(frameon=False, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    bottom.set_title(f"Per {what}: load and capacity")
    bottom.set_ylabel(nodes.load_unit)
    bottom.set_xlabel(what)
    bottom.legend(frameon=False, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if x.size <= 32:
        bottom.set_xticks(x)
    return fig


# ------------------------------------------------------------------- all
#: File name (without .png) and title of every figure, in page order.
FIGURES = {
    "traffic_matrix": "Rank-to-rank traffic",
    "level_traffic": "Traffic per hierarchy level",
    "node_traffic": "Per-node traffic and load",
}


def render_all(data: ReportData, hierarchy) -> dict[str, bytes]:
    """Every figure of :data:`FIGURES` as PNG bytes."""
    makers = {"traffic_matrix": lambda: traffic_matrix_figure(data, hierarchy),
              "level_traffic": lambda: level_figure(data.levels),
              "node_traffic": lambda: node_figure(data.nodes)}
    return {name: png_bytes(makers[name]()) for name in FIGURES}
