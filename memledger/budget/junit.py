"""JUnit XML for CI: one <testcase> per limit, a <failure> for each limit over budget.

The shape GitHub, GitLab and Jenkins read: <testsuites><testsuite name tests failures
errors skipped time><testcase classname name time><failure message type>text</failure>.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from memledger.budget.result import CheckResult
from memledger.outputs import write_atomic


def junit_xml(result: CheckResult, suite: str = "memledger") -> str:
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", {
        "name": suite, "tests": str(len(result.limits)),
        "failures": str(len(result.violations)), "errors": "0", "skipped": "0", "time": "0",
    })
    props = ET.SubElement(ts, "properties")
    for k, v in (("peak_bytes", result.peak_bytes), ("peak_source", result.peak_source),
                 ("steps_traced", result.steps_traced)):
        ET.SubElement(props, "property", {"name": k, "value": str(v)})
    for lim in result.limits:
        tc = ET.SubElement(ts, "testcase", {"classname": f"{suite}.budget",
                                            "name": lim.limit, "time": "0"})
        if not lim.ok:
            fail = ET.SubElement(tc, "failure", {"message": lim.line(), "type": "OverBudget"})
            fail.text = "\n".join([lim.line(), f"budget as written: {lim.budget_text}",
                                   f"measured: {lim.note}"])
        else:
            ET.SubElement(tc, "system-out").text = lim.line()
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def write_text(path: Path, text: str, what: str) -> None:
    write_atomic(path, text, what)


def junit_error_xml(message: str, code: int, suite: str = "memledger") -> str:
    """The check could not run (exit 2: its input; 3: the script failed): one <error>, so a
    CI page shows why instead of an empty or stale report."""
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", {"name": suite, "tests": "1", "failures": "0",
                                           "errors": "1", "skipped": "0", "time": "0"})
    tc = ET.SubElement(ts, "testcase", {"classname": f"{suite}.budget", "name": "check",
                                        "time": "0"})
    err = ET.SubElement(tc, "error", {"message": message.splitlines()[0] if message else "",
                                      "type": f"exit{code}"})
    err.text = f"{message}\nmemledger exit code {code}: the budget was NOT checked"
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"
