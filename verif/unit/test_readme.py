"""The README's Python examples run as written."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_python_examples_run(capsys):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    found = re.fullmatch(r"\(2, 384\) (\d+) ([\d.]+)% ([\d.]+)", printed[0])
    assert found, printed[0]
    assert int(found[1]) > 0 and 50 < float(found[2]) <= 100 and float(found[3]) >= 0.99
