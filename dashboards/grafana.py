"""Grafana's dashboard JSON model as a few plain builders: targets, panels, rows and their layout.

Plain Python rather than Grafana's Foundation SDK or grafanalib: the JSON model is what the
project ships and what the tests read, and the fields this dashboard depends on (the Prometheus
annotation's ``useValueForTime``, ``step``, ``titleFormat``; row ``repeat``; the heatmap's
``calculate: false``) are a few dict keys here, while the SDK's default PyPI release carries
Grafana 10.1's schema (its versions are epochs such as ``1769699998!10.1.0``), whose annotation
type has none of the Prometheus fields. Builders return dicts; ``Layout`` gives ids and positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24


@dataclass(frozen=True)
class Query:
    """One PromQL target. ``instant`` queries answer for the end of the range only (stats, tables)."""

    expr: str
    legend: str = "__auto"
    instant: bool = False
    format: str = "time_series"

    def json(self, ref_id: str) -> Json:
        target: Json = {"datasource": DATASOURCE, "refId": ref_id, "expr": self.expr, "legendFormat": self.legend,
                        "instant": self.instant, "range": not self.instant}
        if self.format != "time_series":
            target["format"] = self.format
        return target


def ref_ids(count: int) -> list[str]:
    return [chr(ord("A") + i) for i in range(count)]


def _panel(kind: str, title: str, description: str, queries: list[Query], width: int, height: int,
           field_config: Json, options: Json) -> Json:
    return {"type": kind, "title": title, "description": description, "datasource": DATASOURCE,
            "gridPos": {"h": height, "w": width},
            "targets": [q.json(ref) for q, ref in zip(queries, ref_ids(len(queries)), strict=True)],
            "fieldConfig": field_config, "options": options}


def thresholds(*steps: tuple[str, float | None]) -> Json:
    return {"mode": "absolute", "steps": [{"color": color, "value": value} for color, value in steps]}


def timeseries(title: str, description: str, queries: list[Query], *, unit: str, width: int = 8,
               height: int = 8, stacked: bool = False, overrides: list[Json] | None = None) -> Json:
    custom = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if stacked else 0, "showPoints": "never",
              "spanNulls": False, "lineInterpolation": "linear",
              "stacking": {"mode": "normal" if stacked else "none", "group": "A"}}
    defaults = {"unit": unit, "min": 0, "custom": custom, "thresholds": thresholds(("green", None))}
    options = {"legend": {"displayMode": "table", "placement": "right", "calcs": ["max", "lastNotNull"],
                          "showLegend": True},
               "tooltip": {"mode": "multi", "sort": "desc"}}
    return _panel("timeseries", title, description, queries, width, height,
                  {"defaults": defaults, "overrides": overrides or []}, options)


def stat(title: str, description: str, queries: list[Query], *, unit: str, steps: Json, width: int = 3,
         height: int = 4, mappings: list[Json] | None = None, no_value: str | None = None) -> Json:
    """A number now: every query instant (a stat of a range query would fetch the whole range)."""
    assert all(q.instant for q in queries), title
    defaults: Json = {"unit": unit, "decimals": 0, "thresholds": steps, "color": {"mode": "thresholds"},
                      "mappings": mappings or []}
    if no_value is not None:
        defaults["noValue"] = no_value
    options = {"colorMode": "background", "graphMode": "none", "justifyMode": "auto", "textMode": "value_and_name",
               "orientation": "auto", "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    return _panel("stat", title, description, queries, width, height, {"defaults": defaults, "overrides": []},
                  options)


@dataclass(frozen=True)
class Column:
    """A table column: one instant query, its header and unit."""

    header: str
    expr: str
    unit: str = "short"
    colored: bool = False


def table(title: str, description: str, keys: list[str], columns: list[Column], *, width: int = 12,
          height: int = 8, steps: Json | None = None, ascending: bool = False) -> Json:
    """Instant queries merged on their labels (``keys`` first), sorted by the first column (largest first
    unless ``ascending``)."""
    refs = ref_ids(len(columns))
    overrides = []
    for ref, column in zip(refs, columns, strict=True):
        properties: list[Json] = [{"id": "displayName", "value": column.header}, {"id": "unit", "value": column.unit}]
        if column.colored:
            properties.append({"id": "custom.cellOptions", "value": {"type": "color-background"}})
        overrides.append({"matcher": {"id": "byName", "options": f"Value #{ref}"}, "properties": properties})
    order = {name: i for i, name in enumerate([*keys, *(f"Value #{ref}" for ref in refs)])}
    defaults = {"custom": {"align": "auto", "cellOptions": {"type": "auto"}},
                "thresholds": steps or thresholds(("green", None))}
    panel = _panel("table", title, description, [Query(c.expr, instant=True, format="table") for c in columns],
                   width, height, {"defaults": defaults, "overrides": overrides},
                   {"showHeader": True, "cellHeight": "sm", "sortBy": [{"displayName": columns[0].header,
                                                                        "desc": not ascending}]})
    panel["transformations"] = [{"id": "merge", "options": {}},
                                {"id": "organize", "options": {"excludeByName": {"Time": True},
                                                               "indexByName": order}}]
    return panel


def heatmap(title: str, description: str, query: Query, *, width: int = 8, height: int = 8) -> Json:
    """Prometheus histogram buckets as they are (``calculate: false``), ``le`` as the y axis."""
    options = {"calculate": False, "cellGap": 1, "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64,
                                                            "exponent": 0.5, "fill": "dark-orange"},
               "yAxis": {"axisPlacement": "left", "unit": "s", "reverse": False},
               "rowsFrame": {"layout": "auto"}, "cellValues": {"unit": "short"},
               "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False},
               "legend": {"show": True}, "exemplars": {"color": "rgba(255,0,255,0.7)"},
               "filterValues": {"le": 1e-9}}
    assert query.format == "heatmap", title
    return _panel("heatmap", title, description, [query], width, height,
                  {"defaults": {"unit": "short"}, "overrides": []}, options)


def bargauge(title: str, description: str, queries: list[Query], *, unit: str, width: int = 12,
             height: int = 8) -> Json:
    defaults = {"unit": unit, "min": 0, "decimals": 0, "thresholds": thresholds(("blue", None))}
    options = {"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True, "valueMode": "color",
               "namePlacement": "left", "sizing": "auto", "minVizHeight": 16, "maxVizHeight": 24,
               "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    return _panel("bargauge", title, description, queries, width, height, {"defaults": defaults, "overrides": []},
                  options)


def state_timeline(title: str, description: str, query: Query, states: list[tuple[str, str]], *,
                   width: int = 12, height: int = 8) -> Json:
    """``query`` returns the index of ``states`` (name, color) the series is in."""
    mapping = {"type": "value", "options": {str(i): {"text": name, "color": color, "index": i}
                                            for i, (name, color) in enumerate(states)}}
    defaults = {"unit": "short", "mappings": [mapping], "color": {"mode": "thresholds"},
                "thresholds": thresholds(("text", None)), "custom": {"fillOpacity": 80, "lineWidth": 0}}
    options = {"showValue": "never", "mergeValues": True, "rowHeight": 0.9, "alignValue": "left",
               "legend": {"showLegend": False, "displayMode": "list", "placement": "bottom"},
               "tooltip": {"mode": "single", "sort": "none"}}
    return _panel("state-timeline", title, description, [query], width, height,
                  {"defaults": defaults, "overrides": []}, options)


@dataclass
class Layout:
    """Places panels left to right in rows of 24 columns and numbers them from 1, in order."""

    panels: list[Json] = field(default_factory=list)
    x: int = 0
    y: int = 0
    line_height: int = 0

    def _newline(self) -> None:
        self.y += self.line_height
        self.x = self.line_height = 0

    def row(self, title: str, *, repeat: str | None = None) -> Json:
        self._newline()
        row: Json = {"type": "row", "title": title, "collapsed": False, "panels": [],
                     "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": self.y}}
        if repeat:
            row["repeat"] = repeat
        self._number(row)
        self.y += 1
        return row

    def add(self, *panels: Json) -> list[int]:
        """Place ``panels``; returns their ids."""
        for panel in panels:
            width, height = panel["gridPos"]["w"], panel["gridPos"]["h"]
            if self.x + width > GRID_WIDTH:
                self._newline()
            panel["gridPos"] = {"h": height, "w": width, "x": self.x, "y": self.y}
            self.x += width
            self.line_height = max(self.line_height, height)
            self._number(panel)
        return [p["id"] for p in panels]

    def _number(self, panel: Json) -> None:
        panel["id"] = len(self.panels) + 1
        self.panels.append(panel)
