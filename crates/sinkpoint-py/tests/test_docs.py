"""The package's documentation holds: every public class and function of ``sinkpoint``, ``sinkpoint.lance``,
``sinkpoint.daft`` and the stubs of the compiled core has a docstring, the main classes have an example, and every
example runs (the stubs' examples are read from the installed ``_sinkpoint.pyi``, as editors show them); the drivers
story (which deployments are safe) is told in the same words by the docstrings, the example's ``--help``, README.md
and docs/protocols/python.md."""

import ast
import doctest
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import sinkpoint

STUB = Path(sinkpoint.__file__).with_name("_sinkpoint.pyi")

#: The classes whose docstring carries a runnable example.
WITH_EXAMPLES = {
    "Driver",
    "SharedStaging",
    "Worker",
    "DirTable",
    "LanceTarget",
    "DeltaTarget",
    "CommitOutcome",
    "ProbeOutcome",
}


def _stub_docstrings():
    """(qualified name, docstring, line) of every public class, function and method of the stub; docstring None
    when it has none."""
    out = []

    def visit(node, prefix):
        for child in node.body:
            if isinstance(child, (ast.ClassDef, ast.FunctionDef)) and not child.name.startswith("_"):
                name = f"{prefix}{child.name}"
                out.append((name, ast.get_docstring(child, clean=False), child.lineno))
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{name}.")

    visit(ast.parse(STUB.read_text()), "")
    return out


def _python_modules():
    modules = [sinkpoint]
    if importlib.util.find_spec("lance") is not None:
        modules.append(importlib.import_module("sinkpoint.lance"))
        if importlib.util.find_spec("daft") is not None:
            modules.append(importlib.import_module("sinkpoint.daft"))
    return modules


def test_every_public_class_and_function_of_the_stub_has_a_docstring():
    missing = [name for name, doc, _ in _stub_docstrings() if not doc]
    assert missing == [], f"no docstring in _sinkpoint.pyi: {missing}"


def test_every_public_name_of_the_python_modules_has_a_docstring():
    missing = []
    for module in _python_modules():
        assert module.__doc__, module.__name__
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) or callable(value):
                if not value.__doc__:
                    missing.append(f"{module.__name__}.{name}")
                for attr, member in vars(value).items() if isinstance(value, type) else ():
                    if not attr.startswith("_") and callable(member) and not member.__doc__:
                        missing.append(f"{module.__name__}.{name}.{attr}")
    assert missing == [], f"no docstring: {missing}"


def test_the_main_classes_have_an_example():
    docs = {name: doc for name, doc, _ in _stub_docstrings()}
    assert sorted(name for name in WITH_EXAMPLES if ">>>" not in (docs.get(name) or "")) == []
    assert ">>>" in sinkpoint.__doc__


def _examples():
    """Every docstring example of the stub and of the Python modules, as doctest.DocTest objects."""
    parser = doctest.DocTestParser()
    tests = [
        parser.get_doctest(doc, {}, f"_sinkpoint.pyi:{name}", str(STUB), line)
        for name, doc, line in _stub_docstrings()
        if doc and ">>>" in doc
    ]
    for module in _python_modules():
        tests += [t for t in doctest.DocTestFinder().find(module) if t.examples]
    return tests


@pytest.mark.parametrize("example", _examples(), ids=lambda t: t.name)
def test_the_example_runs(example, capsys):
    if "lance" in "".join(e.source for e in example.examples) and importlib.util.find_spec("lance") is None:
        pytest.skip("the example needs pylance (pip install sinkpoint[lance])")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(example)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, capsys.readouterr().out


#: What every place that tells the drivers story says about the unsafe deployment (the safe ones are named beside
#: it: one store file, or a store file each and one mirror).
DRIVERS_UNSAFE = "not fenced: both can commit the same inputs, and rows can land twice"


def test_the_drivers_story_is_told_the_same_everywhere():
    root = Path(__file__).resolve().parents[3]
    driver_doc = dict((name, doc) for name, doc, _ in _stub_docstrings())["Driver"]
    places = {
        "sinkpoint": sinkpoint.__doc__,
        "_sinkpoint.pyi Driver": driver_doc,
        "README.md": (root / "README.md").read_text(),
        "docs/protocols/python.md": (root / "docs" / "protocols" / "python.md").read_text(),
    }
    if importlib.util.find_spec("lance") is not None:
        places["sinkpoint.lance"] = importlib.import_module("sinkpoint.lance").__doc__
    if importlib.util.find_spec("daft") is not None:
        example = Path(__file__).resolve().parents[1] / "examples" / "daft_lance_job.py"
        done = subprocess.run([sys.executable, str(example), "--help"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        places["daft_lance_job.py --help"] = done.stdout
        places["sinkpoint.daft.LanceSink"] = importlib.import_module("sinkpoint.daft").LanceSink.__doc__
    wrong = [name for name, text in places.items() if DRIVERS_UNSAFE not in " ".join(text.split())]
    assert wrong == [], f"the drivers story is missing or worded otherwise in {wrong}"
    assert all("mirror" in text for text in places.values())
