"""The examples in README.md ("Use it from Python") and docs/python.md run as written."""
import contextlib
import io
import re

import pytest

from helpers import REPO


def python_blocks(path, section=None):
    text = (REPO / path).read_text()
    if section is not None:
        start = text.index(section)
        end = text.find("\n## ", start + len(section))
        text = text[start : end if end >= 0 else len(text)]
    return re.findall(r"```python\n(.*?)```", text, re.S)


def run_block(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(code, "<example>", "exec"), {"__name__": "__example__"})
    return stdout.getvalue()


def test_readme_python_example(tmp_path, monkeypatch):
    blocks = python_blocks("README.md", "## Use it from Python")
    assert len(blocks) == 1
    printed = run_block(blocks[0], tmp_path, monkeypatch)
    assert printed.split() == ["cpu", "fp32", "(1,)", "(1000,", "1)"]


@pytest.mark.parametrize("index", range(len(python_blocks("docs/python.md"))))
def test_docs_python_examples(index, tmp_path, monkeypatch):
    run_block(python_blocks("docs/python.md")[index], tmp_path, monkeypatch)
