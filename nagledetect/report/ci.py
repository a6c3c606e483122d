"""The CI gate's outputs: a line per capture, JUnit XML, GitHub workflow annotations."""

from __future__ import annotations

from collections import defaultdict
from xml.etree import ElementTree

from nagledetect.gate import RuleResult


def summary_lines(results: list[RuleResult], captures: list[str]) -> list[str]:
    """One line per capture: PASS or FAIL and what failed."""
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
    return lines


def junit_xml(results: list[RuleResult]) -> bytes:
    """One testsuite, one testcase per capture and rule (classname = capture, name = rule)."""
    suite = ElementTree.Element("testsuite", name="nagledetect", tests=str(len(results)),
                                failures=str(sum(not r.passed for r in results)))
    for result in results:
        case = ElementTree.SubElement(suite, "testcase", classname=result.capture, name=result.rule)
        if not result.passed:
            failure = ElementTree.SubElement(case, "failure", message=result.message,
                                             type="budget-exceeded")
            failure.text = result.message
    root = ElementTree.Element("testsuites")
    root.append(suite)
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)


def _escape_annotation(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_annotations(results: list[RuleResult]) -> list[str]:
    """GitHub Actions workflow commands, one ::error per failed rule."""
    return [f"::error file={_escape_annotation(r.capture)},title=nagledetect {r.rule}::"
            f"{_escape_annotation(r.message)}" for r in results if not r.passed]
