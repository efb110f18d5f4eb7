"""The suite's own switch: a test that needs a missing tool skips, or fails where
``$BERTACCEL_REQUIRE_TOOLS`` is 1 (as in ``.ci/run``)."""

import pytest
from _pytest.outcomes import Failed, Skipped

from verif.helpers import REQUIRE_TOOLS, missing_tool


def test_missing_tool_skips(monkeypatch):
    monkeypatch.delenv(REQUIRE_TOOLS, raising=False)
    with pytest.raises(Skipped, match="needs a tool"):
        missing_tool("needs a tool")


def test_missing_tool_fails_where_required(monkeypatch):
    monkeypatch.setenv(REQUIRE_TOOLS, "1")
    with pytest.raises(Failed, match="needs a tool, and BERTACCEL_REQUIRE_TOOLS=1 requires it"):
        missing_tool("needs a tool")
