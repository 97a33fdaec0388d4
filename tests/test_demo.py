"""``catalytic demo``: each section's title says what the routing lines under it show."""

from __future__ import annotations

import re

from catalytic import cli

#: words of a title that claim a backend, and the backend they claim
CLAIMS = {"numpy backend": "numpy", "NetworkX": "numpy", "numba-cpu": "numba-cpu", "cuda": "cuda"}


def _sections(out: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """``[(title, [(op, backend, reason), ...])]`` of the demo's numbered sections."""
    sections = []
    for line in out.splitlines():
        if re.match(r"\d+\. ", line):
            sections.append((line, []))
        elif sections and (m := re.match(r"\s+routed (\S+) -> (\S+): (.*)", line)):
            sections[-1][1].append(m.groups())
    return sections


def test_each_section_title_agrees_with_the_routing_printed_under_it(capsys):
    assert cli.main(["demo"]) == 0
    sections = _sections(capsys.readouterr().out)
    assert len(sections) >= 7
    claimed = 0
    for title, routed in sections:
        assert routed, f"{title!r} prints no routing decision"
        named = {backend for words, backend in CLAIMS.items() if words in title}
        if named:
            claimed += 1
            assert all(backend in named for _, backend, _ in routed), (title, routed)
        if "predicted cost" in title:
            assert all(reason.startswith("lowest predicted cost") for *_, reason in routed), (title, routed)
    assert claimed >= 1  # the graph-library section names the backend it runs on
