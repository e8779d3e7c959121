"""Bad input is refused before anything is written, by an exception of the class that says what to do, naming the
argument or the path: a path, URI or URL of the wrong type and options that are not a mapping (``TypeError``, the
argument named); a store path that can never hold a store and a staging directory that cannot be written
(``InvalidInputError``: permanent, never ``TransientIOError``); a closed ``Driver`` used again
(``IllegalTransitionError``, never a silent reopen under a new epoch). A ``pathlib.Path`` is accepted wherever a
local path is."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import MappingProxyType

import pytest

from sinkpoint import (
    DirTable,
    Driver,
    IllegalTransitionError,
    InvalidInputError,
    LanceTarget,
    SharedStaging,
    TransientIOError,
)


def tree(root: Path) -> list:
    """Every path under ``root``, relative, sorted: what a refused call must leave unchanged."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def table(tmp_path):
    return DirTable(str(tmp_path / "table"))


# ----------------------------------------------------------------------------------------------------------
# Types: paths, URIs and options


@pytest.mark.parametrize(
    "argument, call",
    [
        ("path", lambda d, t: Driver(0, "job-1", t)),
        ("mirror", lambda d, t: Driver(str(d / "s.redb"), "job-1", t, mirror=0)),
        ("path", lambda d, t: DirTable(0)),
        ("uri", lambda d, t: LanceTarget(0)),
        ("uri", lambda d, t: LanceTarget(b"/tmp/x.lance")),
        ("url", lambda d, t: SharedStaging(0, "job-1")),
    ],
    ids=[
        "Driver.path",
        "Driver.mirror",
        "DirTable.path",
        "LanceTarget.uri",
        "LanceTarget.uri-bytes",
        "SharedStaging.url",
    ],
)
def test_a_path_or_uri_that_is_not_a_string_is_a_type_error_naming_the_argument(tmp_path, table, argument, call):
    before = tree(tmp_path)
    with pytest.raises(TypeError, match=rf"\b{argument}\b.*str or os\.PathLike.*not (int|bytes)"):
        call(tmp_path, table)
    assert tree(tmp_path) == before


def test_a_pathlib_path_is_accepted_wherever_a_local_path_is(tmp_path, table):
    staging = SharedStaging(tmp_path / "staging", "job-1")
    assert staging.url == str(tmp_path / "staging")
    assert DirTable(tmp_path / "t2").path == str(tmp_path / "t2")
    assert LanceTarget(tmp_path / "t.lance").uri == str(tmp_path / "t.lance")
    with Driver(tmp_path / "s.redb", "job-1", table, mirror=tmp_path / "mirror", staging=staging) as driver:
        assert driver.epoch == 1
    assert (tmp_path / "s.redb").is_file()


@pytest.mark.parametrize(
    "argument, call",
    [
        ("storage_options", lambda d, t: LanceTarget(str(d / "t.lance"), storage_options=["aws_region", "eu"])),
        ("storage_options", lambda d, t: SharedStaging(f"file://{d}/staging", "job-1", storage_options=[("a", "b")])),
        ("mirror_options", lambda d, t: Driver(str(d / "s.redb"), "job-1", t, mirror_options=["x"])),
    ],
    ids=["LanceTarget", "SharedStaging", "Driver"],
)
def test_options_that_are_not_a_mapping_are_a_type_error_saying_so(tmp_path, table, argument, call):
    before = tree(tmp_path)
    with pytest.raises(TypeError, match=rf"{argument} must be a mapping of str to str.*not list"):
        call(tmp_path, table)
    assert tree(tmp_path) == before


def test_options_must_map_str_to_str_and_any_mapping_will_do(tmp_path):
    with pytest.raises(TypeError, match=r"storage_options\['aws_allow_http'\] must be a str, not bool"):
        LanceTarget(str(tmp_path / "t.lance"), storage_options={"aws_allow_http": True})
    target = LanceTarget(str(tmp_path / "t.lance"), storage_options=MappingProxyType({"aws_region": "eu-west-1"}))
    assert target.storage_options == {"aws_region": "eu-west-1"}


# ----------------------------------------------------------------------------------------------------------
# Store paths that can never hold a store: InvalidInputError naming the path, nothing written


def test_a_store_path_that_is_a_directory_is_invalid_input_naming_it(tmp_path, table):
    (tmp_path / "state").mkdir()
    before = tree(tmp_path)
    driver = Driver(str(tmp_path / "state"), "job-1", table)
    with pytest.raises(InvalidInputError, match=rf"store path {tmp_path}/state is a directory") as raised:
        driver.recover()
    assert not isinstance(raised.value, TransientIOError)
    assert raised.value.kind == "invalid_input"
    assert tree(tmp_path) == before


def test_a_store_path_whose_directory_is_missing_is_invalid_input_naming_the_directory(tmp_path, table):
    before = tree(tmp_path)
    driver = Driver(str(tmp_path / "no" / "such" / "s.redb"), "job-1", table)
    with pytest.raises(InvalidInputError, match=rf"directory {tmp_path}/no/such of the store path .* does not exist"):
        _ = driver.epoch
    assert tree(tmp_path) == before


#: Run by :func:`unprivileged`: the call in ``sys.argv[1]`` (a lambda over ``tmp``), its exception as JSON.
_PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import sinkpoint
    from sinkpoint import DirTable, Driver, SharedStaging
    tmp = Path(sys.argv[2])
    try:
        eval(sys.argv[1])(tmp)
        print(json.dumps(None))
    except Exception as e:
        print(json.dumps([type(e).__name__, isinstance(e, sinkpoint.TransientIOError), str(e)]))
    """
)


def unprivileged(call: str, tmp: Path):
    """``call`` (a lambda over ``tmp``, as source) in a Python process that file permissions bind: under root,
    ``setpriv`` drops the capabilities that bypass them (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a read-only
    directory is read-only to it. Returns ``None`` or ``[class name, is TransientIOError, message]``."""
    command = [sys.executable, "-c", _PROBE, call, str(tmp)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: no way to make a directory read-only to the test")
        command = [setpriv, "--bounding-set", "-dac_override,-dac_read_search", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def read_only(tmp_path):
    """A read-only directory ``ro`` under ``tmp_path`` (made writable again at teardown)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "existing.redb").write_bytes(b"")
    ro.chmod(0o555)
    yield ro
    ro.chmod(0o755)


def test_a_store_path_in_a_read_only_directory_is_invalid_input_naming_it(tmp_path, read_only):
    before = tree(tmp_path)
    raised = unprivileged(
        "lambda tmp: Driver(str(tmp / 'ro' / 's.redb'), 'job-1', DirTable(str(tmp / 't'))).epoch", tmp_path
    )
    assert raised is not None and raised[:2] == ["InvalidInputError", False], raised
    assert f"{read_only}" in raised[2] and "not writable" in raised[2], raised
    assert tree(tmp_path) == before + ["t"]  # DirTable makes its own directory


def test_a_read_only_store_file_is_invalid_input_naming_it(tmp_path, read_only):
    (read_only / "existing.redb").chmod(0o444)
    raised = unprivileged(
        "lambda tmp: Driver(str(tmp / 'ro' / 'existing.redb'), 'job-1', DirTable(str(tmp / 't'))).epoch", tmp_path
    )
    assert raised is not None and raised[:2] == ["InvalidInputError", False], raised
    assert f"{read_only}/existing.redb" in raised[2] and "not writable" in raised[2], raised


@pytest.mark.parametrize("below", ["", "/staging"], ids=["the-directory", "a-directory-below"])
def test_a_read_only_staging_directory_is_invalid_input_naming_it(tmp_path, read_only, below):
    before = tree(tmp_path)
    raised = unprivileged(f"lambda tmp: SharedStaging(f'file://{{tmp}}/ro{below}', 'job-1')", tmp_path)
    assert raised is not None and raised[:2] == ["InvalidInputError", False], raised
    assert f"{read_only}" in raised[2], raised
    assert ("not writable" if below == "" else "cannot be created (Permission denied") in raised[2], raised
    assert tree(tmp_path) == before


# ----------------------------------------------------------------------------------------------------------
# A closed Driver


@pytest.mark.parametrize(
    "use",
    [
        lambda d: d.epoch,
        lambda d: d.recover(),
        lambda d: d.commit_pending(),
        lambda d: d.finish(),
        lambda d: d.is_finished(),
        lambda d: d.checkpoints(),
        lambda d: d.garbage(),
    ],
    ids=["epoch", "recover", "commit_pending", "finish", "is_finished", "checkpoints", "garbage"],
)
@pytest.mark.parametrize("how", ["close", "with"])
def test_a_closed_driver_used_again_raises_and_claims_no_epoch(tmp_path, table, use, how):
    path = str(tmp_path / "s.redb")
    driver = Driver(path, "job-1", table)
    if how == "close":
        assert driver.epoch == 1
        driver.close()
    else:
        with driver:
            assert driver.epoch == 1
    with pytest.raises(IllegalTransitionError, match=rf"this Driver \({path}\) is closed") as raised:
        use(driver)
    assert raised.value.kind == "illegal_transition"
    driver.close()  # closing again is harmless
    with Driver(path, "job-1", table) as again:
        assert again.epoch == 2  # the closed handle claimed no epoch


def test_a_driver_closed_before_its_first_use_stays_closed(tmp_path, table):
    driver = Driver(str(tmp_path / "s.redb"), "job-1", table)
    driver.close()
    with pytest.raises(IllegalTransitionError, match="is closed"):
        driver.recover()
    assert not (tmp_path / "s.redb").exists()


# ----------------------------------------------------------------------------------------------------------
# sinkpoint.lance: the same rules


@pytest.fixture
def lance_helpers():
    pytest.importorskip("lance")
    pa = pytest.importorskip("pyarrow")
    import sinkpoint.lance as sl

    return sl, pa.schema([("x", pa.int64())]), pa


@pytest.mark.parametrize(
    "call",
    [
        lambda sl, schema, pa: sl.create_dataset(0, schema),
        lambda sl, schema, pa: sl.write_fragment(0, pa.table({"x": [1]})),
        lambda sl, schema, pa: sl.LanceDataFiles(0),
    ],
    ids=["create_dataset", "write_fragment", "LanceDataFiles"],
)
def test_lance_a_uri_that_is_not_a_string_is_a_type_error_naming_it(tmp_path, monkeypatch, lance_helpers, call):
    monkeypatch.chdir(tmp_path)  # uri=0 must not become a dataset at ./0
    with pytest.raises(TypeError, match=r"\buri\b.*str or os\.PathLike.*not int"):
        call(*lance_helpers)
    assert tree(tmp_path) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda sl, schema, pa, d: sl.create_dataset(str(d / "t.lance"), schema, storage_options=["aws_region"]),
        lambda sl, schema, pa, d: sl.write_fragment(str(d / "t.lance"), pa.table({"x": [1]}), storage_options=["a"]),
        lambda sl, schema, pa, d: sl.LanceDataFiles(str(d / "t.lance"), storage_options=["ab"]),
    ],
    ids=["create_dataset", "write_fragment", "LanceDataFiles"],
)
def test_lance_options_that_are_not_a_mapping_are_a_type_error_saying_so(tmp_path, lance_helpers, call):
    with pytest.raises(TypeError, match=r"storage_options must be a mapping of str to str.*not list"):
        call(*lance_helpers, tmp_path)
    assert tree(tmp_path) == []


def test_lance_a_pathlib_path_is_accepted(tmp_path, lance_helpers):
    sl, schema, pa = lance_helpers
    uri = tmp_path / "t.lance"
    assert sl.create_dataset(uri, schema).schema.equals(schema)
    fragments = sl.write_fragment(uri, pa.table({"x": [1, 2]}), schema=schema)
    assert len(fragments) == 1
    assert sl.LanceDataFiles(uri).uri == str(uri)
