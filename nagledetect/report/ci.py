"""The CI gate's outputs: a line per capture, JUnit XML, GitHub workflow annotations.

A capture's warnings (the document's: connections seen one way only, no handshake, a capture
cut short) go with its verdict in each output: the gate passed it on weaker evidence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from xml.etree import ElementTree

from nagledetect.gate import RuleResult
from nagledetect.read.inputs import NotAnalysed

UNREADABLE_RULE = "readable"
"""The rule a capture that cannot be analysed fails, in JUnit and GitHub annotations."""
WARNING_RULE = "warning"
"""The title of a capture's warnings in GitHub annotations."""


def summary_lines(results: list[RuleResult], captures: list[str],
                  unreadable: Sequence[NotAnalysed] = (),
                  warnings: Sequence[list[str]] = ()) -> list[str]:
    """One line per capture: PASS or FAIL and what failed, or ERROR when it had nothing to
    check; then a WARNING line for each of its warnings (`warnings`: each capture's, in order).
    An ERROR line for each capture that could not be analysed (the gate cannot vouch for it)."""
    by_capture: dict[int, list[RuleResult]] = defaultdict(list)
    for result in results:
        by_capture[result.position].append(result)
    lines = []
    for position, capture in enumerate(captures):
        lines.append(_verdict_line(capture, by_capture[position]))
        lines += [f"WARNING {capture}: {warning}" for warning in _of(warnings, position)]
    return lines + [f"ERROR {entry.path}: {entry.reason}" for entry in unreadable]


def _verdict_line(capture: str, rules: list[RuleResult]) -> str:
    errors = [r for r in rules if r.error]
    if errors:
        return f"ERROR {capture}: " + " | ".join(r.message for r in errors)
    failed = [r for r in rules if not r.passed]
    if failed:
        return f"FAIL {capture}: " + " | ".join(f"{r.rule}: {r.message}" for r in failed)
    return f"PASS {capture}: " + "; ".join(r.message for r in rules)


def _of(warnings: Sequence[list[str]], position: int) -> list[str]:
    return warnings[position] if position < len(warnings) else []


def junit_xml(results: list[RuleResult], unreadable: Sequence[NotAnalysed] = (),
              warnings: Sequence[list[str]] = ()) -> bytes:
    """One testsuite, one testcase per capture and rule (classname = capture, name = rule); a
    capture that could not be analysed, or had nothing to check, is a testcase in error. A
    capture's warnings are each of its testcases' system-err (JUnit has no warning verdict;
    GitLab and Jenkins show system-err beside the testcase)."""
    errors = [r for r in results if r.error]
    suite = ElementTree.Element("testsuite", name="nagledetect",
                                tests=str(len(results) + len(unreadable)),
                                failures=str(sum(not r.passed and not r.error for r in results)),
                                errors=str(len(errors) + len(unreadable)))
    for result in results:
        case = ElementTree.SubElement(suite, "testcase", classname=result.capture, name=result.rule)
        if result.error:
            _add_verdict(case, "error", result.message, "nothing-to-check")
        elif not result.passed:
            _add_verdict(case, "failure", result.message, "budget-exceeded")
        caveats = _of(warnings, result.position)
        if caveats:
            ElementTree.SubElement(case, "system-err").text = "\n".join(
                f"warning: {warning}" for warning in caveats)
    for entry in unreadable:
        case = ElementTree.SubElement(suite, "testcase", classname=entry.path, name=UNREADABLE_RULE)
        _add_verdict(case, "error", entry.reason, "input-error")
    root = ElementTree.Element("testsuites")
    root.append(suite)
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)


def _add_verdict(case: ElementTree.Element, tag: str, message: str, kind: str) -> None:
    verdict = ElementTree.SubElement(case, tag, message=message, type=kind)
    verdict.text = message


def _escape_annotation(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """A workflow command's property value: also its separators escaped."""
    return _escape_annotation(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(results: list[RuleResult], unreadable: Sequence[NotAnalysed] = (),
                       captures: Sequence[str] = (),
                       warnings: Sequence[list[str]] = ()) -> list[str]:
    """GitHub Actions workflow commands: one ::error per failed rule, per capture that had
    nothing to check and per capture that could not be analysed; one ::warning per warning of
    a capture (`captures` and `warnings`: the run's captures and each one's, in order)."""
    failed = [(r.capture, r.rule, r.message) for r in results if not r.passed]
    failed += [(entry.path, UNREADABLE_RULE, entry.reason) for entry in unreadable]
    lines = [_annotation("error", path, rule, message) for path, rule, message in failed]
    return lines + [_annotation("warning", capture, WARNING_RULE, warning)
                    for position, capture in enumerate(captures)
                    for warning in _of(warnings, position)]


def _annotation(level: str, path: str, title: str, message: str) -> str:
    return (f"::{level} file={_escape_property(path)},title=nagledetect {title}::"
            f"{_escape_annotation(message)}")
