# Runs every dtensor snippet of docs/python-pytorch.md ("dtensor for PyTorch users"),
# in order, as one program: a page whose snippets stopped working fails here.
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python-pytorch.md"


def snippets():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    return [b for b in blocks if b.startswith("# dtensor")]


def test_page_has_paired_snippets():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    torch = [b for b in blocks if b.startswith("# PyTorch")]
    assert len(snippets()) >= 6 and len(torch) == len(snippets())


def test_dtensor_snippets_run_in_order(capsys):
    namespace = {"__name__": "docs_python"}
    for i, code in enumerate(snippets()):
        try:
            exec(compile(code, f"{DOC.name}[snippet {i}]", "exec"), namespace)
        except Exception as e:  # name the snippet that failed
            pytest.fail(f"docs/python-pytorch.md snippet {i} failed: {type(e).__name__}: {e}\n{code}")
    out = capsys.readouterr().out
    # The outputs the page shows in comments.
    assert "(Partial(sum), Shard(dim=1))" in out
    assert "['gain', 'up.weight', 'up.bias', 'down.weight', 'down.bias']" in out
