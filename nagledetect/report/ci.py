"""The CI gate's outputs: a line per capture, JUnit XML, GitHub workflow annotations."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from xml.etree import ElementTree

from nagledetect.gate import RuleResult
from nagledetect.read.inputs import NotAnalysed

UNREADABLE_RULE = "readable"
"""The rule a capture that cannot be analysed fails, in JUnit and GitHub annotations."""


def summary_lines(results: list[RuleResult], captures: list[str],
                  unreadable: Sequence[NotAnalysed] = ()) -> list[str]:
    """One line per capture: PASS or FAIL and what failed; ERROR for each that could not be
    analysed (the gate cannot vouch for it)."""
    by_capture: dict[int, list[RuleResult]] = defaultdict(list)
    for result in results:
        by_capture[result.position].append(result)
    lines = []
    for position, capture in enumerate(captures):
        rules = by_capture.get(position, [])
        failed = [r for r in rules if not r.passed]
        if not rules:
            lines.append(f"PASS {capture}: no budget configured")
        elif failed:
            lines.append(f"FAIL {capture}: " + " | ".join(f"{r.rule}: {r.message}" for r in failed))
        else:
            lines.append(f"PASS {capture}: " + "; ".join(r.message for r in rules))
    return lines + [f"ERROR {entry.path}: {entry.reason}" for entry in unreadable]


def junit_xml(results: list[RuleResult], unreadable: Sequence[NotAnalysed] = ()) -> bytes:
    """One testsuite, one testcase per capture and rule (classname = capture, name = rule); a
    capture that could not be analysed is a testcase in error."""
    suite = ElementTree.Element("testsuite", name="nagledetect",
                                tests=str(len(results) + len(unreadable)),
                                failures=str(sum(not r.passed for r in results)),
                                errors=str(len(unreadable)))
    for result in results:
        case = ElementTree.SubElement(suite, "testcase", classname=result.capture, name=result.rule)
        if not result.passed:
            failure = ElementTree.SubElement(case, "failure", message=result.message,
                                             type="budget-exceeded")
            failure.text = result.message
    for entry in unreadable:
        case = ElementTree.SubElement(suite, "testcase", classname=entry.path, name=UNREADABLE_RULE)
        error = ElementTree.SubElement(case, "error", message=entry.reason, type="input-error")
        error.text = entry.reason
    root = ElementTree.Element("testsuites")
    root.append(suite)
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)


def _escape_annotation(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_annotations(results: list[RuleResult],
                       unreadable: Sequence[NotAnalysed] = ()) -> list[str]:
    """GitHub Actions workflow commands, one ::error per failed rule and per capture that
    could not be analysed."""
    failed = [(r.capture, r.rule, r.message) for r in results if not r.passed]
    failed += [(entry.path, UNREADABLE_RULE, entry.reason) for entry in unreadable]
    return [f"::error file={_escape_annotation(path)},title=nagledetect {rule}::"
            f"{_escape_annotation(message)}" for path, rule, message in failed]
