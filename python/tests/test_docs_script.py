# docs/python-pytorch.md, "The whole script": the dtensor block is
# python/examples/train_llama.py, the diff the page shows is the diff of the
# two blocks, and it changes imports only (the bar: imports and the
# mesh/world line; the mesh line is the same too). (ctest example.python.train_llama[.mpi] runs the file.)
import difflib
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "python-pytorch.md"
EXAMPLE = ROOT / "python" / "examples" / "train_llama.py"


def section():
    text = DOC.read_text()
    return text[text.index("## The whole script"):]


def blocks():
    sec = section()
    code = re.findall(r"```python\n(.*?)```", sec, flags=re.S)
    shown = re.findall(r"```diff\n(.*?)```", sec, flags=re.S)
    assert len(code) == 2 and len(shown) == 1
    return code[0], code[1], shown[0]


def test_the_dtensor_block_is_the_example():
    _, dt_src, _ = blocks()
    assert dt_src == EXAMPLE.read_text()


def test_the_diff_shown_is_the_diff():
    torch_src, dt_src, shown = blocks()
    a = torch_src.splitlines()[1:]  # past the first comment (where it runs)
    b = dt_src.splitlines()[2:]
    diff = list(difflib.unified_diff(a, b, lineterm="", n=0))[2:]
    assert "\n".join(diff) + "\n" == shown


def test_the_diff_is_imports_only():
    torch_src, dt_src, _ = blocks()
    a = torch_src.splitlines()[1:]
    b = dt_src.splitlines()[2:]
    changed = [l[1:] for l in difflib.unified_diff(a, b, lineterm="", n=0)
               if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    assert changed, "the two blocks differ at least in their imports"
    in_import = False
    others = []
    for line in changed:
        stripped = line.strip()
        if stripped.startswith(("import ", "from ")) or in_import:
            in_import = "(" in line and ")" not in line if not in_import else ")" not in line
            continue
        others.append(stripped)
    assert others == []
    # the PyTorch spelling of the batch split is in both
    split = 'tokens = tokens.chunk(mesh["dp"].size())[mesh["dp"].get_local_rank()]'
    assert split in torch_src and split in dt_src
