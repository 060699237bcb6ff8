"""Inline SVG charts for the HTML reports: roofline, horizontal bars, the ladder, a small timeline.

Plain SVG strings, no JavaScript library, so that a page renders offline, in print and in a mail
attachment. Every label that comes from data (kernel, backend and metric names) goes through
`escape`; the functions return `Markup` so the autoescaping Jinja templates insert them as is.
Colours are CSS classes (`.c-rung`, `.c-base`, ...) that the page's stylesheet defines, so one
stylesheet serves screen and print.
"""

from __future__ import annotations

import math
from typing import Callable
from dataclasses import dataclass

from markupsafe import Markup, escape

FONT_PX = 11          # label size; the stylesheet sets the family
CHAR_PX = 6.2         # rough width of one label character at FONT_PX, to size the label gutter


def _num(x: float) -> str:
    """Compact coordinates: SVG does not need more than 0.1 px."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def fmt_si(value: float, digits: int = 3) -> str:
    """3 significant digits with thousands separators for big numbers, for axis ticks and bar labels."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if value == 0:
        return "0"
    mag = abs(value)
    if mag < 1e-4:            # errors such as 3e-06 read better in scientific notation
        return f"{value:.{digits - 1}e}"
    if mag >= 1000:
        return f"{value:,.0f}"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(mag))))
    return f"{value:.{decimals}f}"


class LogScale:
    """Maps [lo, hi] (positive, widened to whole decades) onto pixels [p0, p1] logarithmically."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float):
        self.lo_exp = math.floor(math.log10(lo))
        self.hi_exp = math.ceil(math.log10(hi))
        if self.hi_exp == self.lo_exp:
            self.hi_exp += 1
        self.p0, self.p1 = p0, p1

    @property
    def lo(self) -> float:
        return 10.0 ** self.lo_exp

    @property
    def hi(self) -> float:
        return 10.0 ** self.hi_exp

    def __call__(self, v: float) -> float:
        t = (math.log10(v) - self.lo_exp) / (self.hi_exp - self.lo_exp)
        return self.p0 + t * (self.p1 - self.p0)

    def decades(self) -> list[float]:
        return [10.0 ** e for e in range(self.lo_exp, self.hi_exp + 1)]


# ---------------------------------------------------------------------------------------- roofline

@dataclass(frozen=True)
class RooflinePoint:
    label: str
    intensity_flop_per_byte: float
    tflops: float
    kind: str = "rung"            # "rung" (ours) or "base" (an SDPA backend)
    series: int = 0               # colour of a baseline (one per backend): CSS class .s<N>
    shape: str = "circle"         # baselines: circle, diamond or triangle (one per dtype); rungs are squares


def _marker(p: RooflinePoint, cx: float, cy: float, r: float) -> str:
    cls = f"pt c-{escape(p.kind)}" + (f" s{p.series % 8}" if p.kind != "rung" else "")
    if p.kind == "rung":
        return f'<rect class="{cls}" x="{_num(cx - r)}" y="{_num(cy - r)}" width="{_num(2 * r)}" height="{_num(2 * r)}"/>'
    if p.shape == "diamond":
        pts = f"{_num(cx)},{_num(cy - r * 1.3)} {_num(cx + r * 1.3)},{_num(cy)} {_num(cx)},{_num(cy + r * 1.3)} {_num(cx - r * 1.3)},{_num(cy)}"
        return f'<polygon class="{cls}" points="{pts}"/>'
    if p.shape == "triangle":
        pts = f"{_num(cx)},{_num(cy - r * 1.3)} {_num(cx + r * 1.2)},{_num(cy + r)} {_num(cx - r * 1.2)},{_num(cy + r)}"
        return f'<polygon class="{cls}" points="{pts}"/>'
    return f'<circle class="{cls}" cx="{_num(cx)}" cy="{_num(cy)}" r="{_num(r)}"/>'


@dataclass(frozen=True)
class Roof:
    label: str
    tflops: float
    kind: str                     # "fp32" or "tensor"


def roofline_svg(points: list[RooflinePoint], roofs: list[Roof], dram_tbps: float | None,
                 width: int = 760, height: int = 380) -> Markup:
    """Log-log roofline: the memory roof (DRAM TB/s x intensity) capped by each compute roof.

    TB/s times FLOP/byte is TFLOP/s, so the memory roof is y = dram_tbps * x in these units.
    """
    pts = [p for p in points if p.intensity_flop_per_byte > 0 and p.tflops > 0]
    if not pts:
        return Markup("")
    left, right, top, bottom = 64, 175, 14, 44
    xs = [p.intensity_flop_per_byte for p in pts]
    ys = [p.tflops for p in pts] + [r.tflops for r in roofs]
    if dram_tbps:
        xs += [r.tflops / dram_tbps for r in roofs]       # ridge points
    x = LogScale(min(xs) / 3, max(xs) * 3, left, width - right)
    y = LogScale(min(ys) / 3, max(ys) * 2, height - bottom, top)

    out = [_svg_open(width, height, "Roofline: achieved TFLOP/s against arithmetic intensity")]
    out += _log_grid(x, y, width - right, height - bottom, left, top)
    out.append(_axis_titles("arithmetic intensity (FLOP/byte, log)", "TFLOP/s (log)", width - right,
                            height, left, top, bottom))
    for roof in sorted(roofs, key=lambda r: r.tflops):
        ridge = roof.tflops / dram_tbps if dram_tbps else x.lo
        x0 = max(ridge, x.lo)
        out.append(f'<line class="roof roof-{escape(roof.kind)}" x1="{_num(x(x0))}" y1="{_num(y(roof.tflops))}" '
                   f'x2="{_num(x(x.hi))}" y2="{_num(y(roof.tflops))}"/>')
        out.append(f'<text class="roof-label" x="{_num(x(x.hi) - 4)}" y="{_num(y(roof.tflops) - 5)}" '
                   f'text-anchor="end">{escape(roof.label)} TFLOP/s</text>')
    if dram_tbps:
        top_roof = max((r.tflops for r in roofs), default=y.hi)
        x_end = min(top_roof / dram_tbps, x.hi)
        x_start = max(x.lo, y.lo / dram_tbps)
        out.append(f'<line class="roof roof-dram" x1="{_num(x(x_start))}" y1="{_num(y(dram_tbps * x_start))}" '
                   f'x2="{_num(x(x_end))}" y2="{_num(y(dram_tbps * x_end))}"/>')
        lx = x_start * 1.6
        out.append(f'<text class="roof-label" x="{_num(x(lx) + 4)}" y="{_num(y(dram_tbps * lx) - 6)}">'
                   f'DRAM {escape(fmt_si(dram_tbps))} TB/s</text>')
    for p in sorted(pts, key=lambda p: p.kind == "rung"):   # ours drawn last, on top
        px, py = x(p.intensity_flop_per_byte), y(p.tflops)
        out.append(f'<g><title>{escape(p.label)}: {escape(fmt_si(p.tflops))} TFLOP/s at '
                   f'{escape(fmt_si(p.intensity_flop_per_byte))} FLOP/byte</title>{_marker(p, px, py, 5)}</g>')
    for i, p in enumerate(pts):
        yy = top + 10 + i * 16
        out.append(_marker(p, width - right + 12.5, yy - 3.5, 4.5)
                   + f'<text class="legend" x="{_num(width - right + 22)}" y="{_num(yy)}">{escape(p.label)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


# ----------------------------------------------------------------------------------- bar charts

@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    kind: str = "base"            # CSS class suffix: rung, base, ref, warn
    note: str = ""                # printed after the value (e.g. "x 1.6 of minimum")


def hbar_svg(bars: list[Bar], unit: str, title: str, width: int = 720, log: bool = False,
             fmt: Callable[[float], str] | None = None) -> Markup:
    """Horizontal bars, one per row, labelled on the left with the value on the right; `fmt` words
    a value with its unit (default: 3 significant digits, then `unit`), so a chart can print its
    values exactly as the table beside it does."""
    fmt = fmt or (lambda v: f"{fmt_si(v)} {unit}".rstrip())
    bars = [b for b in bars if b.value is not None and math.isfinite(b.value) and (b.value > 0 or not log)]
    if not bars:
        return Markup("")
    row, top = 22, 8
    label_w = min(300, int(max(len(b.label) for b in bars) * CHAR_PX) + 12)
    value_w = 200
    height = top + row * len(bars) + 8
    x0, x1 = label_w, width - value_w
    vmax = max(b.value for b in bars)
    if log:
        scale = LogScale(min(b.value for b in bars) / 2, vmax, x0, x1)
        length = lambda v: max(1.0, scale(v) - x0)  # noqa: E731
    else:
        length = lambda v: 0 if vmax <= 0 else (x1 - x0) * v / vmax  # noqa: E731
    out = [_svg_open(width, height, title)]
    for i, b in enumerate(bars):
        yy = top + i * row
        out.append(f'<text class="bar-label" x="{label_w - 6}" y="{yy + 14}" text-anchor="end">{escape(b.label)}</text>')
        out.append(f'<rect class="bar c-{escape(b.kind)}" x="{x0}" y="{yy + 3}" width="{_num(length(b.value))}" height="{row - 7}">'
                   f'<title>{escape(b.label)}: {escape(fmt(b.value))}</title></rect>')
        text = fmt(b.value) + (f" {b.note}" if b.note else "")
        out.append(f'<text class="bar-value" x="{_num(x0 + length(b.value) + 5)}" y="{yy + 14}">{escape(text)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def ladder_svg(bars: list[Bar], width: int = 760, height: int = 300) -> Markup:
    """Vertical TFLOP/s bars on a log axis: the rungs beside the SDPA backends (spans of 1000x are usual)."""
    bars = [b for b in bars if b.value and b.value > 0 and math.isfinite(b.value)]
    if not bars:
        return Markup("")
    # rotated labels (35 degrees) need room below the axis and, for the last bar, to its right
    longest = max(len(b.label) for b in bars) * CHAR_PX
    left, right, top = 64, max(10, int(longest * 0.82) - 20), 14
    bottom = int(longest * 0.58) + 24
    height = max(height, bottom + 200)
    y = LogScale(min(b.value for b in bars) / 2, max(b.value for b in bars) * 1.5, height - bottom, top)
    slot = (width - left - right) / len(bars)
    bw = min(46.0, slot * 0.7)
    out = [_svg_open(width, height, "Ladder: TFLOP/s of each rung beside the SDPA backends")]
    for v in y.decades():
        yy = y(v)
        out.append(f'<line class="grid" x1="{left}" y1="{_num(yy)}" x2="{width - right}" y2="{_num(yy)}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{_num(yy + 4)}" text-anchor="end">{escape(fmt_si(v))}</text>')
    out.append(f'<text class="axis-title" transform="translate(14 {_num((top + height - bottom) / 2)}) rotate(-90)" '
               f'text-anchor="middle">TFLOP/s (log)</text>')
    for i, b in enumerate(bars):
        cx = left + slot * (i + 0.5)
        yy = y(b.value)
        out.append(f'<rect class="bar c-{escape(b.kind)}" x="{_num(cx - bw / 2)}" y="{_num(yy)}" width="{_num(bw)}" '
                   f'height="{_num(height - bottom - yy)}"><title>{escape(b.label)}: {escape(fmt_si(b.value))} TFLOP/s'
                   f'</title></rect>')
        out.append(f'<text class="bar-value" x="{_num(cx)}" y="{_num(yy - 4)}" text-anchor="middle">'
                   f'{escape(fmt_si(b.value))}</text>')
        out.append(f'<text class="tick" transform="translate({_num(cx + 3)} {height - bottom + 10}) rotate(35)">'
                   f'{escape(b.label)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


# ----------------------------------------------------------------------------------- line charts

LINE_COLOURS = ("#dc2626", "#2563eb", "#0f766e", "#7c3aed", "#ca8a04", "#db2777", "#0891b2", "#4d7c0f", "#6b7280")
LINE_DASHES = ("", "6 3", "2 3", "8 3 2 3")


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]   # (x, y); missing values are left out, the line breaks there
    dashed: bool = False                      # e.g. a second timing method of the same implementation


def _ticks(scale: LogScale, values: list[float]) -> list[float]:
    """The data's own x values when few (N = 512, 1024, ...), else the decades."""
    if len(set(values)) <= 12:
        return sorted(set(values))
    return [10.0 ** e for e in range(math.ceil(scale.lo_exp), math.floor(scale.hi_exp) + 1)]


def _nice_step(raw: float) -> float:
    """1, 2, 2.5 or 5 times a power of ten, at least `raw`: axis ticks a reader can add up."""
    mag = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def _tick_label(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else fmt_si(v)


def line_svg(series: list[Series], x_title: str, y_title: str, title: str, width: int = 560, height: int = 300,
             log_y: bool = True) -> Markup:
    """Lines with markers on log-log axes (log x always: N and batch double), one colour per series;
    a gap in a series (an out-of-memory point) breaks its line instead of bridging it."""
    pts = [(x, y) for s in series for x, y in s.points if x and y and x > 0 and y > 0 and math.isfinite(y)]
    if not pts:
        return Markup("")
    legend_w = min(200, int(max(len(s.label) for s in series) * CHAR_PX) + 34)
    right, top, bottom = legend_w, 22, 42
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    if log_y:
        y = LogScale(min(ys) / 1.5, max(ys) * 1.5, height - bottom, top)
        yticks = y.decades()
        if len(yticks) <= 2:   # less than a decade: ticks at 1-2-5
            yticks = sorted({m * 10.0 ** e for e in range(y.lo_exp, y.hi_exp + 1) for m in (1, 2, 5)
                             if y.lo <= m * 10.0 ** e <= y.hi})
        ypos = y
    else:
        step = _nice_step(max(ys) * 1.1 / 5)
        hi = step * math.ceil(max(ys) * 1.1 / step)
        ypos = lambda v: (height - bottom) - (height - bottom - top) * v / hi  # noqa: E731
        yticks = [i * step for i in range(int(round(hi / step)) + 1)]
    ylabels = {v: _tick_label(v) if log_y else fmt_si(v) for v in yticks}
    # room for the widest tick label and the rotated axis title, so "1,000,000" is never clipped
    left = max(60, int(max((len(s) for s in ylabels.values()), default=0) * CHAR_PX) + 34)
    x = LogScale(min(xs) / 1.3, max(xs) * 1.3, left, width - right)
    x.lo_exp, x.hi_exp = math.log10(min(xs) / 1.3), math.log10(max(xs) * 1.3)   # tight: ticks at the data
    out = [_svg_open(width, height, title)]
    out.append(f'<text class="legend" x="{left}" y="13">{escape(title)}</text>')
    for v in yticks:
        yy = ypos(v)
        if top - 1 <= yy <= height - bottom + 1:
            out.append(f'<line class="grid" x1="{left}" y1="{_num(yy)}" x2="{width - right}" y2="{_num(yy)}"/>')
            out.append(f'<text class="tick" x="{left - 5}" y="{_num(yy + 4)}" text-anchor="end">{escape(ylabels[v])}</text>')
    for v in _ticks(x, xs):
        xx = x(v)
        out.append(f'<line class="grid" x1="{_num(xx)}" y1="{top}" x2="{_num(xx)}" y2="{height - bottom}"/>')
        out.append(f'<text class="tick" x="{_num(xx)}" y="{height - bottom + 14}" text-anchor="middle">{escape(_tick_label(v))}</text>')
    out.append(f'<rect class="frame" x="{left}" y="{top}" width="{width - right - left}" height="{height - bottom - top}"/>')
    out.append(_axis_titles(x_title, y_title, width - right, height, left, top, bottom))
    for i, s in enumerate(series):
        colour = LINE_COLOURS[i % len(LINE_COLOURS)]
        dash = f' stroke-dasharray="{LINE_DASHES[1]}"' if s.dashed else ""
        runs, cur = [], []
        for px_, py_ in s.points:
            if px_ and py_ and py_ > 0 and math.isfinite(py_):
                cur.append((x(px_), ypos(py_), px_, py_))
            elif cur:
                runs.append(cur)
                cur = []
        if cur:
            runs.append(cur)
        for run in runs:
            if len(run) > 1:
                path = " ".join(f"{_num(a)},{_num(b)}" for a, b, _, _ in run)
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{path}"/>')
            for a, b, vx, vy in run:
                out.append(f'<circle cx="{_num(a)}" cy="{_num(b)}" r="3" fill="{colour}"><title>{escape(s.label)}: '
                           f'{escape(fmt_si(vy))} at {escape(fmt_si(vx))}</title></circle>')
        ly = top + 8 + i * 15
        out.append(f'<line x1="{width - right + 8}" y1="{ly - 4}" x2="{width - right + 26}" y2="{ly - 4}" stroke="{colour}" '
                   f'stroke-width="2"{dash}/><text class="legend" x="{width - right + 30}" y="{ly}">{escape(s.label)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


# ------------------------------------------------------------------------------------- timeline

@dataclass(frozen=True)
class Span:
    lane: str                     # e.g. "kernels", "nvtx", "cuda api"
    name: str
    start_ns: float
    end_ns: float


def timeline_svg(spans: list[Span], width: int = 720, enclosing_lane: str = "nvtx") -> tuple[Markup, int]:
    """A small Gantt chart: one lane per kind of event, time from the first event in microseconds.
    Returns the SVG and how many bars were cut at the right edge."""
    spans = sorted((s for s in spans if s.end_ns >= s.start_ns), key=lambda s: s.start_ns)
    if not spans:
        return Markup(""), 0
    lanes = list(dict.fromkeys(s.lane for s in spans))
    t0 = min(s.start_ns for s in spans)
    # The time axis ends with the last event that is not an enclosing range: an NVTX range around a
    # whole program would otherwise squeeze every kernel into a pixel. Longer bars are cut at the edge.
    inner = [s.end_ns for s in spans if s.lane != enclosing_lane] or [s.end_ns for s in spans]
    t1 = max(inner)
    total = max(t1 - t0, 1.0)
    left, right, row, top = 90, 36, 24, 8
    height = top + row * len(lanes) + 30
    px = lambda t: left + (width - left - right) * (t - t0) / total  # noqa: E731
    out = [_svg_open(width, height, "Timeline of the recorded events")]
    for i, lane in enumerate(lanes):
        yy = top + i * row
        out.append(f'<text class="bar-label" x="{left - 6}" y="{yy + 15}" text-anchor="end">{escape(lane)}</text>')
        out.append(f'<line class="grid" x1="{left}" y1="{yy + row - 2}" x2="{width - right}" y2="{yy + row - 2}"/>')
    for s in spans:
        yy = top + lanes.index(s.lane) * row
        x0 = px(s.start_ns)
        w = max(px(min(s.end_ns, t1)) - x0, 1.0)   # a 1 ns kernel must still be visible
        out.append(f'<rect class="span lane-{lanes.index(s.lane) % 4}" x="{_num(x0)}" y="{yy + 4}" width="{_num(w)}" '
                   f'height="{row - 10}"><title>{escape(s.name)}: {escape(fmt_si((s.end_ns - s.start_ns) / 1e3))} µs'
                   f'</title></rect>')
    axis_y = top + row * len(lanes) + 14
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        t = t0 + frac * total
        out.append(f'<text class="tick" x="{_num(px(t))}" y="{axis_y}" text-anchor="middle">'
                   f'{escape(fmt_si((t - t0) / 1e3))} µs</text>')
    out.append("</svg>")
    return Markup("".join(out)), sum(s.end_ns > t1 for s in spans)


# ----------------------------------------------------------------------------------- the ledger

@dataclass(frozen=True)
class GainStep:
    label: str                                    # "v1 -> v2"
    predicted: tuple[float, float] | None         # the header's range (low == high for one number)
    measured: float | None                        # median gain over the common works
    measured_range: tuple[float, float] | None    # lowest and highest of the works
    note: str = ""                                # e.g. "across dtypes", shown under the label


def gain_svg(steps: list[GainStep], width: int = 760, height: int = 320) -> Markup:
    """Predicted against measured gain per step, log y: the prediction a shaded band (its range), the
    measurement a dot on a whisker from the lowest to the highest work; a line at 1x (no change)."""
    vals = [v for s in steps for v in ((*(s.predicted or ()), s.measured, *(s.measured_range or ())))
            if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return Markup("")
    left, right, top, bottom = 64, 16, 28, 58
    y = LogScale(min(vals + [1.0]) / 1.3, max(vals + [1.0]) * 1.3, height - bottom, top)
    slot = (width - left - right) / len(steps)
    title = "Ledger: predicted (band) and measured (dot, lowest..highest work) gain per step"
    out = [_svg_open(width, height, title), f'<text class="legend" x="{left}" y="14">{escape(title)}</text>']
    for v in y.decades():
        yy = y(v)
        out.append(f'<line class="grid" x1="{left}" y1="{_num(yy)}" x2="{width - right}" y2="{_num(yy)}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{_num(yy + 4)}" text-anchor="end">{escape(fmt_si(v))}x</text>')
    one = y(1.0)
    out.append(f'<line class="roof roof-dram" x1="{left}" y1="{_num(one)}" x2="{width - right}" y2="{_num(one)}"/>')
    out.append(f'<text class="axis-title" transform="translate(14 {_num((top + height - bottom) / 2)}) rotate(-90)" '
               f'text-anchor="middle">gain (log)</text>')
    bw = min(40.0, slot * 0.45)
    for i, s in enumerate(steps):
        cx = left + slot * (i + 0.5)
        if s.predicted:
            lo, hi = s.predicted
            y_hi, y_lo = y(hi), y(lo)
            h = max(y_lo - y_hi, 3.0)
            out.append(f'<rect class="c-base" opacity="0.35" x="{_num(cx - bw / 2)}" y="{_num(y_hi - (h - (y_lo - y_hi)) / 2)}" '
                       f'width="{_num(bw)}" height="{_num(h)}"><title>{escape(s.label)}: predicted '
                       f'{escape(fmt_si(lo))}{"" if lo == hi else "-" + escape(fmt_si(hi))}x</title></rect>')
        if s.measured is not None and s.measured > 0:
            if s.measured_range and s.measured_range[0] != s.measured_range[1]:
                a, b = (y(v) for v in s.measured_range)
                out.append(f'<line class="roof roof-fp32" x1="{_num(cx)}" y1="{_num(a)}" x2="{_num(cx)}" y2="{_num(b)}"/>')
            out.append(f'<circle class="c-rung" cx="{_num(cx)}" cy="{_num(y(s.measured))}" r="5"><title>{escape(s.label)}: '
                       f'measured {escape(fmt_si(s.measured))}x</title></circle>')
            out.append(f'<text class="bar-value" x="{_num(cx + bw / 2 + 3)}" y="{_num(y(s.measured) + 4)}">'
                       f'{escape(fmt_si(s.measured))}x</text>')
        else:
            out.append(f'<text class="tick" x="{_num(cx)}" y="{_num(one - 6)}" text-anchor="middle">not measured</text>')
        out.append(f'<text class="tick" x="{_num(cx)}" y="{height - bottom + 16}" text-anchor="middle">{escape(s.label)}</text>')
        if s.note:
            out.append(f'<text class="tick" x="{_num(cx)}" y="{height - bottom + 30}" text-anchor="middle">{escape(s.note)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


# -------------------------------------------------------------------------------------- helpers

def _svg_open(width: int, height: int, title: str) -> str:
    return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}" '
            f'font-size="{FONT_PX}"><title>{escape(title)}</title>')


def _log_grid(x: LogScale, y: LogScale, x_end: float, y_end: float, left: float, top: float) -> list[str]:
    out = []
    for v in x.decades():
        xx = x(v)
        out.append(f'<line class="grid" x1="{_num(xx)}" y1="{top}" x2="{_num(xx)}" y2="{_num(y_end)}"/>')
        out.append(f'<text class="tick" x="{_num(xx)}" y="{_num(y_end + 14)}" text-anchor="middle">{escape(fmt_si(v))}</text>')
    for v in y.decades():
        yy = y(v)
        out.append(f'<line class="grid" x1="{left}" y1="{_num(yy)}" x2="{_num(x_end)}" y2="{_num(yy)}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{_num(yy + 4)}" text-anchor="end">{escape(fmt_si(v))}</text>')
    out.append(f'<rect class="frame" x="{left}" y="{top}" width="{_num(x_end - left)}" height="{_num(y_end - top)}"/>')
    return out


def _axis_titles(x_title: str, y_title: str, x_end: float, height: float, left: float, top: float,
                 bottom: float) -> str:
    return (f'<text class="axis-title" x="{_num((left + x_end) / 2)}" y="{_num(height - 8)}" text-anchor="middle">'
            f'{escape(x_title)}</text>'
            f'<text class="axis-title" transform="translate(14 {_num((top + height - bottom) / 2)}) rotate(-90)" '
            f'text-anchor="middle">{escape(y_title)}</text>')
