"""The HTML report's first screen: time by cause, and the findings as cards in the terminal's
order (`text.diagnosis`), each with its reasons, hold and reaction times, warnings, one
recommended fix (its code in the language chosen on the page, the other fixes folded) and its
Wireshark display filter.

Everything is read from the document; cards are numbered as they are shown, so the numbers
run on without gaps whatever the cap left out.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from nagledetect.detectors import kinds
from nagledetect.report.document import kinds_and_times
from nagledetect.report.evidence_words import evidence_line, reaction_text
from nagledetect.report.headline import duration_text
from nagledetect.report.text import (
    KIND_TITLES,
    LANGUAGES,
    Diagnosis,
    cost_text,
    folded_line,
    in_capture,
)

CARDS_IN_FULL = 10
"""Findings shown as full cards; the rest of those listed come as short cards under them."""
EVIDENCE_SHOWN = 3
CAUSES = (
    ("Nagle family", kinds.NAGLE_FAMILY, "#d62728"),
    ("loss recovery", (kinds.LOSS_RECOVERY,), "#ff7f0e"),
    ("zero window", (kinds.ZERO_WINDOW,), "#8c564b"),
    ("small receive window", (kinds.WINDOW_LIMITED,), "#e377c2"),
    ("handshake retries", (kinds.HANDSHAKE_RETRY,), "#9467bd"),
    ("think time", (kinds.THINK_TIME,), "#1f77b4"),
    ("idle (nobody waiting)", (kinds.IDLE,), "#c7c7c7"),
)
"""The causes of the time-by-cause bar, in its order, with their colours."""
LANGUAGE_SCRIPT = """
(function(){
  var pick = document.getElementById('lang');
  if (!pick) return;
  function show(){
    document.querySelectorAll('pre.code').forEach(function(code){
      code.hidden = code.dataset.lang !== pick.value;
    });
  }
  pick.addEventListener('change', show);
  show();
})();
document.querySelectorAll('button.copy').forEach(function(button){
  button.addEventListener('click', function(){
    var text = button.dataset.copy;
    function done(){ button.textContent = 'Copied'; setTimeout(function(){
      button.textContent = 'Copy'; }, 1500); }
    function byHand(){
      var area = document.createElement('textarea');
      area.value = text; document.body.appendChild(area); area.select();
      document.execCommand('copy'); area.remove(); done();
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, byHand);
    } else { byHand(); }
  });
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def time_by_cause(document: dict[str, Any]) -> str:
    """One bar: each cause's time over every finding of the run, from the findings' times."""
    kind_of_each, times = kinds_and_times(document["findings"])
    by_kind: dict[str, float] = {}
    for kind, lost in zip(kind_of_each, times):
        by_kind[kind] = by_kind.get(kind, 0.0) + lost
    totals = [(name, sum(by_kind.get(kind, 0.0) for kind in members), colour)
              for name, members, colour in CAUSES]
    whole = sum(seconds for _, seconds, _ in totals)
    if whole <= 0:
        return ("<p class='note'>Time by cause: no finding counts any time (no stall, loss, "
                "window or idle gap).</p>")
    segments = "".join(
        f"<div style='width:{100 * seconds / whole:.3f}%;background:{colour}' "
        f"title='{_e(name)}: {_e(duration_text(seconds))}'></div>"
        for name, seconds, colour in totals if seconds > 0)
    legend = "".join(
        f"<span class='key'><i style='background:{colour}'></i>{_e(name)} "
        f"<b>{_e(duration_text(seconds))}</b> ({_percent(seconds / whole)})</span>"
        for name, seconds, colour in totals if seconds > 0)
    return ("<h2>Time by cause</h2><div class='causes'>" + segments + "</div>"
            f"<p class='legend'>{legend}</p><p class='note'>Summed over every connection's "
            "findings; idle time is time nobody waited for, not time lost.</p>")


def _percent(fraction: float) -> str:
    """A share, to a tenth of a per cent below 10 % (a cause of 0.2 % is not "0 %")."""
    return f"{100 * fraction:.1f}%" if fraction < 0.1 else f"{100 * fraction:.0f}%"


def language_picker() -> str:
    options = "".join(f"<option>{_e(language)}</option>" for language in LANGUAGES)
    return (f"<p class='pick'><label>Show the fixes' code for <select id='lang'>{options}"
            "</select></label></p>")


def cards(document: dict[str, Any], found: Diagnosis, notes: list[str],
          captures_shown: int) -> str:
    """The findings listed, numbered from 1 as shown: the first CARDS_IN_FULL in full, the
    rest short; then each capture's folded line (idle, stop-and-wait)."""
    parts = [_card(rank, finding, document)
             for rank, (_, finding) in enumerate(found.shown[:CARDS_IN_FULL], 1)]
    rest = found.shown[CARDS_IN_FULL:]
    if rest:
        shorts = "".join(_short_card(rank, finding, document) for rank, (_, finding)
                         in enumerate(rest, CARDS_IN_FULL + 1))
        parts.append(f"<details><summary>{len(rest)} more findings, each costing less"
                     f"</summary>{shorts}</details>")
    left_out = sum(found.left_out.values())
    if left_out:
        notes.append(f"findings: {len(found.shown)} of {len(found.shown) + left_out:,} are "
                     "listed, the Nagle family first, then the other causes, each by time lost, "
                     "then the patterns (all are in the JSON output)")
    folded = found.folded[:captures_shown]
    if len(folded) < len(found.folded):
        notes.append(f"idle and stop-and-wait: {len(folded):,} of {len(found.folded):,} "
                     "captures (all are in the JSON output)")
    for rank, line in enumerate(folded, len(found.shown) + 1):
        parts.append(f"<div class='finding folded'><b>{rank}.</b> "
                     f"{_e(folded_line(line, in_capture(document, {'capture': line.capture})))}."
                     "</div>")
    return "".join(parts) or "<p>No findings.</p>"


def _heading(rank: int, finding: dict[str, Any], document: dict[str, Any]) -> str:
    title = KIND_TITLES.get(finding["kind"], finding["kind"])
    if finding.get("subkind"):
        title += f" ({finding['subkind']})"
    family = " nagle" if kinds.is_nagle_family(finding["kind"]) else ""
    return (f"<div class='head{family}'><b>{rank}. {_e(title)}</b> on connection "
            f"{finding['connection']}{_e(in_capture(document, finding))}: "
            f"{_e(cost_text(finding))}, confidence {_e(finding['confidence']['level'])}</div>")


def _card(rank: int, finding: dict[str, Any], document: dict[str, Any]) -> str:
    reasons = finding["confidence"]["reasons"]
    why = ("<p><b>Why we think so:</b></p><ul>" + "".join(f"<li>{_e(r)}</li>" for r in reasons)
           + "</ul>" if reasons else "")
    warnings = "".join(f"<p class='warn'>&#9888; {_e(w)}</p>"
                       for w in finding.get("details", {}).get("warnings", []))
    return (f"<div class='finding'>{_heading(rank, finding, document)}"
            f"<p>{_e(finding['summary'])}.</p>{_times(finding)}{why}{_evidence(finding)}"
            f"{warnings}{_fixes(finding, document)}{_filter(finding)}</div>")


def _short_card(rank: int, finding: dict[str, Any], document: dict[str, Any]) -> str:
    return (f"<div class='finding short'>{_heading(rank, finding, document)}"
            f"<p>{_e(finding['summary'])}.</p>{_filter(finding)}</div>")


def _times(finding: dict[str, Any]) -> str:
    """The median delayed-ACK hold and the sender's reaction, where the detector measured them."""
    details = finding.get("details", {})
    parts = []
    # A hold of one round trip waits for an ordinary ACK: there is no receiver's hold to show.
    if (details.get("median_ack_delay_ms") is not None
            and finding["kind"] != kinds.NAGLE_RTT_HOLD):
        parts.append(f"the receiver held its ACK <b>{details['median_ack_delay_ms']:.1f} ms"
                     "</b> (median)")
    if details.get("median_reaction_ms") is not None:
        parts.append(f"the held data left <b>{reaction_text(details['median_reaction_ms'])}</b> "
                     "after the ACK (median)")
    return f"<p class='times'>Hold and reaction: {'; '.join(parts)}.</p>" if parts else ""


def _evidence(finding: dict[str, Any]) -> str:
    """The first events: a stall's three frames; a gap's two (nothing released it: there is
    no ACK frame to show)."""
    events = finding["events"][:EVIDENCE_SHOWN]
    if not events:
        return ""
    lines = [evidence_line(finding["kind"], event, "&rarr;") for event in events]
    more = len(finding["events"]) - len(events)
    tail = f"<li>&hellip; and {more} more (all in the JSON output)</li>" if more > 0 else ""
    listed = "".join(f"<li>{line}</li>" for line in lines)
    return f"<p><b>Evidence:</b></p><ul class='evidence'>{listed}{tail}</ul>"


def _fixes(finding: dict[str, Any], document: dict[str, Any]) -> str:
    keys = [key for key in finding["advice"] if key in document["advice"]]
    if not keys:
        return ""
    first = _fix(keys[0], finding, document, recommended=True)
    others = "".join(_fix(key, finding, document, recommended=False) for key in keys[1:])
    folded = (f"<details><summary>{len(keys) - 1} other fix{'es' if len(keys) > 2 else ''}"
              f"</summary>{others}</details>" if others else "")
    return first + folded


def _fix(key: str, finding: dict[str, Any], document: dict[str, Any], recommended: bool) -> str:
    advice = document["advice"][key]
    who = {"sender": f"the sender {finding['sender']}",
           "receiver": f"the receiver {finding['receiver']}",
           "network": "the network path"}.get(advice["side"], "the application protocol")
    label = ("Where to look" if advice["side"] == "network"
             else "Recommended fix" if recommended else "Fix")
    code = "".join(f"<pre class='code' data-lang='{_e(language)}'>{_e(call)}</pre>"
                   for language, call in _calls(advice))
    return (f"<div class='fix{' first' if recommended else ''}'><b>{label} ({_e(who)}):</b> "
            f"{_e(advice['title'])} <span class='note'>[{_e(key)}]</span>"
            f"<p>{_e(advice['why'])}</p><p class='note'>Trade-offs: {_e(advice['tradeoffs'])}"
            f"</p>{code}</div>")


def _calls(advice: dict[str, Any]) -> Sequence[tuple[str, str]]:
    return [(language, advice["calls"][language]) for language in LANGUAGES
            if language in advice["calls"]]


def _filter(finding: dict[str, Any]) -> str:
    shown = finding["display_filter"]
    return (f"<div class='filter'>Wireshark display filter: <code>{_e(shown)}</code> "
            f"<button class='copy' type='button' data-copy='{_e(shown)}'>Copy</button></div>")
