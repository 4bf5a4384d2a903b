"""The OSU Micro-Benchmarks text format: write it, and read it back.

osu_allgather, osu_latency and osu_bw print ``#`` header lines (a title with the
version, then column names separated by runs of spaces) and one row per message
size. Versions differ in spacing and wording, so the reader splits on whitespace,
takes the first column as the size in bytes and the rest as numbers, and only uses
the column names it can find. cxlsim writes the same format (with ``-f`` columns).

>>> table = OSUTable(title="cxlsim pool allgather", columns=("Size", "Avg Latency(us)"),
...                  rows=((1, 0.25), (2, 0.5)))
>>> parse_osu(format_osu(table))[0].column("Avg Latency(us)")
[0.25, 0.5]
"""
from __future__ import annotations

import dataclasses
import re

from cxlsim.errors import InputError

ALLGATHER_COLUMNS = ("Size", "Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Iterations")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OSUTable:
    """One OSU table. title: the first header line without '#'. columns: names, 'Size' first.
    rows: (size_bytes, value, ...) per message size; sizes in bytes, latencies in us,
    bandwidths in MB/s, as OSU prints them."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple, ...]

    @property
    def kind(self) -> str:
        """'allgather', 'latency', 'bw' or 'unknown', from the title."""
        title = self.title.lower()
        for word, kind in (("allgather", "allgather"), ("bandwidth", "bw"), ("latency", "latency")):
            if word in title:
                return kind
        return "unknown"

    @property
    def sizes(self) -> list[int]:
        return [row[0] for row in self.rows]

    def column(self, name: str) -> list:
        """Values of the column called `name` (case and spacing are ignored)."""
        wanted = _norm(name)
        for i, col in enumerate(self.columns):
            if _norm(col) == wanted:
                return [row[i] for row in self.rows]
        raise InputError(f"OSU table {self.title!r} has no column {name!r} (columns: {list(self.columns)})")


def _norm(name: str) -> str:
    return re.sub(r"\s+", "", name).lower()


def format_osu(table: OSUTable) -> str:
    """Render `table` as OSU prints it: '%-10d' sizes, then '%18.2f' values (integers as-is)."""
    lines = [f"# {table.title}", "# " + _header(table.columns)]
    for row in table.rows:
        cells = [f"{row[0]:<10d}"]
        for value in row[1:]:
            cells.append(f"{value:>18d}" if isinstance(value, int) else f"{value:>18.2f}")
        lines.append("".join(cells))
    return "\n".join(lines) + "\n"


def _header(columns) -> str:
    return f"{columns[0]:<10}" + "".join(f"{c:>18}" for c in columns[1:])


def parse_osu(text: str, source: str = "<text>") -> list[OSUTable]:
    """Parse every table in `text`; raise InputError naming `source` and the line on bad input."""
    tables, title, columns, rows = [], None, None, []

    def finish():
        if rows:
            names = columns if columns and len(columns) == len(rows[0]) else \
                ("Size",) + tuple(f"col{i}" for i in range(1, len(rows[0])))
            tables.append(OSUTable(title=title or "untitled", columns=tuple(names), rows=tuple(rows)))

    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            if re.match(r"size\b", body, re.IGNORECASE):
                if rows:  # a new column header after rows starts a new table with the same title
                    finish()
                    rows = []
                columns = tuple(re.split(r"\s{2,}", body))
            elif body:
                if rows:  # a title after rows starts the next table
                    finish()
                    rows, columns, title = [], None, None
                if title is None:
                    title = body  # the first header line names the test; later ones (datatype...) are notes
            continue
        cells = line.split()
        try:
            row = (int(cells[0]),) + tuple(_number(c) for c in cells[1:])
        except ValueError:
            raise InputError(f"{source}:{lineno}: expected a size in bytes followed by numbers, got {raw!r}") from None
        if len(row) < 2 or row[0] < 0:
            raise InputError(f"{source}:{lineno}: expected a size in bytes followed by numbers, got {raw!r}")
        if rows and len(row) != len(rows[0]):
            raise InputError(f"{source}:{lineno}: {len(row)} columns, but earlier rows have {len(rows[0])}")
        rows.append(row)
    finish()
    if not tables:
        raise InputError(f"{source}: no OSU data rows found (expected lines like '1024   3.21')")
    return tables


def _number(cell: str):
    return int(cell) if re.fullmatch(r"\d+", cell) else float(cell)


def read_osu(path: str) -> list[OSUTable]:
    """Read every OSU table in the file at `path`."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_osu(text, source=path)
