# Runs the Python snippets of README.md and docs/*.md (those of
# docs/python-pytorch.md run in test_docs_pytorch.py), each page's in order as
# one program, and checks what a `print(...)  # output` line says it prints
# (when the comment is a literal, e.g. `# {'all_gather': 1}`, not prose): a
# page whose snippets stopped working, or print something else, fails here.
import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md")
                                      if p.name != "python-pytorch.md")


def snippets(page):
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def promised_prints(code):
    """The lines the snippet's `print(...)  # literal` lines say they print."""
    return [m.group(1).strip() for m in re.finditer(r"^print\(.*\)\s+#\s*(.*)$", code, flags=re.M)
            if re.match(r"""[\[{('"0-9-]""", m.group(1))]


def test_the_pages_have_snippets():
    assert sum(len(snippets(p)) for p in PAGES) >= 1


@pytest.mark.parametrize("page", [p for p in PAGES if snippets(p)], ids=lambda p: p.name)
def test_snippets_run_and_print_what_they_say(page):
    namespace = {"__name__": "docs_snippets"}
    for i, code in enumerate(snippets(page)):
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"{page.name}[python snippet {i}]", "exec"), namespace)
        except Exception as e:  # name the snippet that failed
            pytest.fail(f"{page.name} python snippet {i} failed: {type(e).__name__}: {e}\n{code}")
        lines = out.getvalue().split("\n")
        for want in promised_prints(code):
            assert want in lines, f"{page.name} python snippet {i}: no line '{want}' in:\n{out.getvalue()}"
