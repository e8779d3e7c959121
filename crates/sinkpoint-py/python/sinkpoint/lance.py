"""A sinkpoint target over a Lance dataset, in pure Python over pylance 14.0.2.

The Python twin of the Rust ``sinkpoint_lance::LanceTarget`` (``crates/sinkpoint-lance/src/target.rs``): the same
transaction properties, the same key check, the same "only version V + 1" fence and the same outcomes, so the
Rust adapter, the CLI and this module read each other's commits. The design is in ``docs/protocols/lance.md``
and ``docs/protocols/python.md``.

- Workers call :func:`write_fragment` (uncommitted fragments, invisible to readers) and stage each fragment as a
  ``lance-fragment-json`` write result (``sinkpoint.WriteResult.from_lance_fragment`` or :func:`fragment_json`).
- The driver passes a :class:`LanceTarget` to ``sinkpoint.Driver``; the Rust committer calls its ``version``,
  ``commit`` and ``probe`` (the ``sinkpoint.Target`` protocol).
- Maintenance calls :meth:`LanceTarget.cleanup_old_versions` with ``Driver.retention_watermark()``, and
  ``Driver.collect_data_files(LanceDataFiles(uri))`` to delete the data files of dropped attempts (restarted,
  aborted, lost seals) that no commit will ever reference.

This module does not import the compiled ``sinkpoint._sinkpoint``: it works (and its tests run) without it.

The fence is weaker than the Rust one, and why: pylance has no way to wrap Lance's own commit handler, only a
``commit_lock``. Lance then commits through its lock-based handler, which checks that the manifest of V + 1 is
absent and then writes it unconditionally (not with the conditional put of the default handler). Against
writers that do not hold the same lock (another process, the Rust adapter, any plain pylance writer) there is a
window between that check and that write in which their commit of V + 1 can be overwritten by ours. Keep one
committing driver per dataset at a time (the store's epochs fence older drivers) and expect foreign writers to be
rare; where that is not acceptable, commit through the Rust adapter.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Set, Tuple, Union

import lance
import pyarrow as pa
from lance.commit import CommitConflictError
from lance.fragment import FragmentMetadata, write_fragments

__all__ = [
    "CHECKPOINT_ID_BYTES_MAX",
    "DEFAULT_CLEANUP_AGE",
    "FOREIGN_COMMIT_RETRIES_MAX",
    "LANCE_FRAGMENT_JSON",
    "PROP_EPOCH",
    "PROP_FINAL",
    "PROP_IDS",
    "PROP_JOB",
    "PROP_KEY",
    "LanceDataFiles",
    "LanceTarget",
    "create_dataset",
    "fragment_json",
    "write_fragment",
]

# ----------------------------------------------------------------------------------------------------------
# Limits and names shared with the Rust adapter (keep them equal to the Rust constants named beside them).

#: How many times one commit re-reads the table after a foreign commit took V + 1 before it gives up (and answers
#: not_landed: every attempt was refused before publishing anything). ``sinkpoint_lance::limits``.
FOREIGN_COMMIT_RETRIES_MAX = 32

#: The most bytes of a checkpoint id (``sinkpoint::limits::CHECKPOINT_ID_BYTES_MAX``); a recorded id over it, or
#: with a character outside ``[A-Za-z0-9._-]``, is damage.
CHECKPOINT_ID_BYTES_MAX = 128

#: The format tag of a pylance ``FragmentMetadata`` staged as its JSON (``sinkpoint_lance::FRAGMENT_JSON_FORMAT``,
#: the binding's ``LANCE_FRAGMENT_JSON``).
LANCE_FRAGMENT_JSON = "lance-fragment-json"

#: The transaction properties of a sinkpoint commit (``sinkpoint_lance`` ``props.rs``).
PROP_JOB = "sinkpoint.job"
PROP_KEY = "sinkpoint.key"
PROP_EPOCH = "sinkpoint.epoch"
PROP_IDS = "sinkpoint.ids"
PROP_FINAL = "sinkpoint.final"

#: The age pylance's ``cleanup_old_versions`` removes by default when given neither an age nor a count.
DEFAULT_CLEANUP_AGE = timedelta(days=14)

#: The first version of a Lance dataset (the one its creation wrote).
_FIRST_VERSION = 1
#: The largest value a Rust ``u64`` (key number, epoch) holds.
_U64_MAX = 2**64 - 1
_U64_TEXT = re.compile(r"\+?[0-9]+")  # what Rust's `str::parse::<u64>` accepts
_CHECKPOINT_ID = re.compile(r"[A-Za-z0-9._-]+")

# What the Rust committer accepts back from a Python target.
CommitAnswer = Union[Literal["committed"], Tuple[Literal["not_landed", "unknown"], str]]
ProbeAnswer = Union[
    Literal["not_committed"],
    Tuple[Literal["committed"], Optional[List[str]]],
    Tuple[Literal["unknown"], str],
]

# The exceptions pylance raises for its own failures (I/O, not found, conflicts: OSError and its subclass
# CommitConflictError; invalid input and a missing dataset: ValueError). Anything else is a bug and propagates:
# raising from ``commit`` or ``probe`` counts as an unknown outcome for the committer, never as a guess.
_LANCE_ERRORS = (OSError, ValueError)


# ----------------------------------------------------------------------------------------------------------
# Worker side


def write_fragment(
    uri: str,
    data: Any,
    schema: Optional[pa.Schema] = None,
    storage_options: Optional[Dict[str, str]] = None,
) -> List[FragmentMetadata]:
    """Writes ``data`` (a ``pyarrow.Table``, ``RecordBatchReader`` or anything ``lance.fragment.write_fragments``
    reads) into the data directory of the dataset at ``uri`` without committing it.

    The fragments are invisible to readers until the driver commits them through :class:`LanceTarget`. Stage each
    one as a write result (``sinkpoint.WriteResult.from_lance_fragment(f)``, or ``format=LANCE_FRAGMENT_JSON``
    with ``data=fragment_json(f)``). The dataset must exist (:func:`create_dataset`); ``data`` must fit its schema.
    Raises pylance's error when the write fails: nothing was staged, retry the task. Files written before a
    failure, or of a checkpoint that is never committed, are unreferenced (Lance's cleanup removes them); those of
    a staged attempt that was dropped are also collected by ``Driver.collect_data_files(LanceDataFiles(uri))``.
    """
    return write_fragments(data, uri, schema=schema, mode="append", storage_options=storage_options)


def fragment_json(fragment: FragmentMetadata) -> bytes:
    """The bytes of a ``lance-fragment-json`` write result for ``fragment``: ``json.dumps(fragment.to_json())``,
    as the binding's ``WriteResult.from_lance_fragment`` and the Rust adapter's ``decode_fragment`` take them."""
    return json.dumps(fragment.to_json()).encode()


def create_dataset(
    uri: str, schema: pa.Schema, storage_options: Optional[Dict[str, str]] = None
) -> lance.LanceDataset:
    """The dataset at ``uri``, created empty with ``schema`` if it does not exist yet (the target requires it).

    Safe to call from every process that starts a job: when two create it at once, one creation wins and the
    other opens it. Raises ``ValueError`` when the dataset exists with another schema (nothing is changed: fix the
    schema or the URI), and pylance's error when it can neither be created nor opened (retry; check the URI and
    ``storage_options``).
    """
    try:
        return lance.write_dataset(
            schema.empty_table(), uri, schema=schema, mode="create", storage_options=storage_options
        )
    except _LANCE_ERRORS as create_error:
        # Mostly "already exists"; told apart by opening it rather than by the error's text.
        try:
            existing = lance.dataset(uri, storage_options=storage_options)
        except _LANCE_ERRORS:
            raise create_error from None
    if not existing.schema.equals(schema, check_metadata=False):
        raise ValueError(f"the dataset at {uri} exists with another schema: {existing.schema} (wanted {schema})")
    return existing


# ----------------------------------------------------------------------------------------------------------
# Transaction properties


@dataclass(frozen=True)
class Recorded:
    """What a landed sinkpoint commit recorded in its transaction properties."""

    job: str
    n: int
    epoch: int
    ids: List[str]


def encode_properties(commit: Any) -> Dict[str, str]:
    """The transaction properties of ``commit`` (a ``TargetCommit``), byte for byte as the Rust adapter writes them:
    decimal key and epoch, the ids as a compact JSON array of strings, ``final`` as ``"true"``/``"false"``."""
    return {
        PROP_JOB: str(commit.job),
        PROP_KEY: str(int(commit.key)),
        PROP_EPOCH: str(int(commit.epoch)),
        PROP_IDS: json.dumps([str(i) for i in commit.ids], separators=(",", ":"), ensure_ascii=False),
        PROP_FINAL: "true" if commit.final else "false",
    }


class PropertiesDamaged(ValueError):
    """A sinkpoint commit's properties do not parse: damage. Never guess a key from it; report it."""


def decode_properties(props: Optional[Mapping[str, str]]) -> Optional[Recorded]:
    """The sinkpoint commit recorded in ``props``: ``None`` for a commit that is not sinkpoint's (no
    ``sinkpoint.job``). Raises :class:`PropertiesDamaged` for a sinkpoint commit whose key, epoch or ids do not
    parse, exactly where the Rust adapter's ``props::decode`` fails (``sinkpoint.final`` is not read)."""
    if not props or PROP_JOB not in props:
        return None

    def field(name: str) -> str:
        value = props.get(name)
        if value is None:
            raise PropertiesDamaged(f"property {name} is missing")
        return value

    def u64(name: str) -> int:
        text = field(name)
        if not _U64_TEXT.fullmatch(text) or int(text) > _U64_MAX:
            raise PropertiesDamaged(f"property {name}: {text!r} is not a u64")
        return int(text)

    n = u64(PROP_KEY)
    epoch = u64(PROP_EPOCH)
    try:
        raw = json.loads(field(PROP_IDS))
    except ValueError as e:
        raise PropertiesDamaged(f"property {PROP_IDS}: {e}") from None
    if not isinstance(raw, list) or not all(isinstance(i, str) for i in raw):
        raise PropertiesDamaged(f"property {PROP_IDS}: not a JSON array of strings")
    for i in raw:
        if (
            not _CHECKPOINT_ID.fullmatch(i)
            or len(i.encode()) > CHECKPOINT_ID_BYTES_MAX
            or i in (".", "..")
        ):
            raise PropertiesDamaged(f"property {PROP_IDS}: {i!r} is not a checkpoint id")
    return Recorded(job=props[PROP_JOB], n=n, epoch=epoch, ids=raw)


class _RangeUnreadable(Exception):
    """A version's transaction cannot be read, or its sinkpoint properties are damaged: nothing can be concluded
    about the range. ``args[0]`` is the reason."""


def _job_commits(dataset: lance.LanceDataset, job: str, first: int, last: int) -> List[Recorded]:
    """The job's sinkpoint commits in versions ``first ..= last``, oldest first (``LanceDataset.read_transaction``
    per version). Raises :class:`_RangeUnreadable` when a version's transaction is gone (``cleanup_old_versions``),
    missing or unreadable, or a sinkpoint commit's properties are damaged."""
    out = []
    for version in range(first, last + 1):
        try:
            transaction = dataset.read_transaction(version)
        except _LANCE_ERRORS as e:
            raise _RangeUnreadable(f"version {version} cannot be read (cleaned up?): {e}") from None
        if transaction is None:
            raise _RangeUnreadable(f"version {version} has no transaction file")
        try:
            recorded = decode_properties(transaction.transaction_properties)
        except PropertiesDamaged as e:
            raise _RangeUnreadable(f"version {version}: {e}") from None
        if recorded is not None and recorded.job == job:
            out.append(recorded)
    return out


def _key_check(dataset: lance.LanceDataset, commit: Any, read_version: int) -> Optional[CommitAnswer]:
    """Checks, on the table as of ``read_version``, that key n of the job is not there yet and no newer key or
    epoch of the job landed after the intent. ``None``: commit. Only versions after ``prepared_version`` are read:
    our key n cannot land before its intent, which was recorded after the prepared version was read."""
    first = _FIRST_VERSION if commit.prepared_version is None else int(commit.prepared_version) + 1
    try:
        recorded_commits = _job_commits(dataset, str(commit.job), first, read_version)
    except _RangeUnreadable as e:
        return ("unknown", e.args[0])
    ids = [str(i) for i in commit.ids]
    for recorded in recorded_commits:
        if recorded.n == commit.key:
            if recorded.epoch == commit.epoch and recorded.ids == ids:
                # Our own earlier attempt landed (its answer was lost): the same commit, so it is committed.
                return "committed"
            return ("not_landed", f"key {recorded.n} is taken by epoch {recorded.epoch} for {recorded.ids}")
        if recorded.n > commit.key or recorded.epoch > commit.epoch:
            return ("not_landed", f"fenced: key {recorded.n} of epoch {recorded.epoch} landed after the intent")
    return None


# ----------------------------------------------------------------------------------------------------------
# The fence


class _NextVersionOnly:
    """A pylance ``commit_lock`` that lets through only manifest version ``expected`` (V + 1) and records how far
    the commit got (pylance's errors do not say it reliably).

    pylance calls ``lock(version)`` for the version it is about to write, then ``__enter__``; raising there stops
    the commit before anything is written (it surfaces as a generic ``OSError``, "internal error ... Error from
    commit handler"). Once entered, Lance checks the manifest of ``version`` is absent and writes it. ``__exit__``
    is called with ``(None, None, None)`` whether that write happened or Lance found the version taken (pylance
    14.0.2), so entering is the last thing this lock can know.
    """

    def __init__(self, expected: int) -> None:
        self.expected = expected
        #: Every version pylance asked for, in order.
        self.asked: List[int] = []
        #: The versions refused (pylance rebased the commit past V + 1: a foreign commit landed first).
        self.refused: List[int] = []
        #: How many times the commit entered the lock for V + 1 (Lance went on to check and write it).
        self.entered = 0
        #: How many times it left the lock (with no telling whether the write happened).
        self.exited = 0

    def __call__(self, version: int) -> "_Lease":
        self.asked.append(version)
        return _Lease(self, version)

    def __repr__(self) -> str:
        return f"_NextVersionOnly(expected={self.expected}, asked={self.asked})"


class _Lease:
    """One entry of :class:`_NextVersionOnly` (the context manager pylance enters and exits)."""

    def __init__(self, fence: _NextVersionOnly, version: int) -> None:
        self.fence = fence
        self.version = version

    def __enter__(self) -> None:
        if self.version != self.fence.expected:
            self.fence.refused.append(self.version)
            raise CommitConflictError(
                f"sinkpoint fence: version {self.version} refused, only {self.fence.expected} may be written"
            )
        self.fence.entered += 1

    def __exit__(self, *exc: Any) -> Literal[False]:
        self.fence.exited += 1
        return False


# ----------------------------------------------------------------------------------------------------------
# The target


class LanceTarget:
    """A sinkpoint target (the ``sinkpoint.Target`` protocol) over the Lance dataset at ``uri``.

    The dataset must exist (:func:`create_dataset`). ``storage_options`` are pylance's (for S3: ``aws_endpoint``,
    ``aws_region``, ``allow_http``, credentials). The target keeps no state between calls: any number of them may
    point at one dataset, and it pickles as its URI and options.

    Commit of key n is one Append of every fragment of the key, carrying the properties ``sinkpoint.job``,
    ``.key``, ``.epoch``, ``.ids`` and ``.final`` on its transaction. Each attempt opens the latest version V,
    reads the transactions of ``prepared_version + 1 ..= V`` (the key check) and commits with Lance's retries off
    through a lock that refuses every manifest version but V + 1.
    """

    def __init__(self, uri: str, storage_options: Optional[Dict[str, str]] = None) -> None:
        self._uri = str(uri)
        self._storage_options = dict(storage_options) if storage_options else None

    @property
    def uri(self) -> str:
        """The dataset's URI."""
        return self._uri

    @property
    def storage_options(self) -> Optional[Dict[str, str]]:
        """pylance's storage options for the dataset (a copy)."""
        return dict(self._storage_options) if self._storage_options else None

    @property
    def identity(self) -> str:
        """The identity to record in the store (``Driver(..., target_identity=target.identity)``): ``lance:<uri>``.
        A store opened against another identity refuses it (``WrongStore``)."""
        return f"lance:{self._uri}"

    def __repr__(self) -> str:
        return f"LanceTarget({self._uri!r})"

    def open(self) -> lance.LanceDataset:
        """The dataset at its latest version. Raises pylance's error (``ValueError`` when it does not exist,
        ``OSError`` for I/O)."""
        return lance.dataset(self._uri, storage_options=self._storage_options)

    # -- the Target protocol ------------------------------------------------------------------------------

    def version(self) -> Optional[int]:
        """The dataset's latest version. Raises pylance's error when it cannot be read (the committer reports it
        as a target error: retry later)."""
        return self.open().version

    def commit(self, commit: Any) -> CommitAnswer:
        """Commits key ``commit.key`` of ``commit.job``: one Append of ``commit.results``, at most once.

        Answers:

        - ``"committed"``: the key's commit is in the table (this call's, or an earlier attempt's whose answer was
          lost: the key check found the same epoch and ids).
        - ``("not_landed", reason)``: nothing of this call is in the table: the key is taken by another writer or
          epoch, a newer key or epoch landed after the intent ("fenced"), a result is not a Lance fragment, Lance
          failed before publishing, or foreign commits took the next version ``FOREIGN_COMMIT_RETRIES_MAX + 1``
          times in a row. The committer decides (a fenced driver stops; a taken key is probed).
        - ``("unknown", reason)``: the table could not be read, a sinkpoint commit in the range is damaged or was
          cleaned up, or the commit failed after Lance began writing its manifest and the outcome could not be
          read back. The committer probes the key later; an operator settles what a probe cannot.

        Raising (only for a bug, never for pylance's own failures) counts as unknown.
        """
        results = _decode_results(commit.results)
        for _ in range(FOREIGN_COMMIT_RETRIES_MAX + 1):
            outcome = self._attempt(commit, results)
            if outcome is not None:
                return outcome
        return (
            "not_landed",
            f"foreign commits took the next version {FOREIGN_COMMIT_RETRIES_MAX} times in a row",
        )

    def probe(self, job: str, key: int, prepared_version: Optional[int]) -> ProbeAnswer:
        """Whether key ``key`` of ``job`` landed in the versions after ``prepared_version`` (all of them for
        ``None``).

        ``("committed", ids)``: it did, with these checkpoint ids. ``"not_committed"``: every version since the
        intent was read and none holds it (a late attempt could only land above them, where the next commit's key
        check finds it first). ``("unknown", reason)``: a version in the range is gone (``cleanup_old_versions``
        past the retention watermark), unreadable, or holds damaged sinkpoint properties: never a guess; the key
        waits for an operator (``sinkpoint resolve``).
        """
        try:
            dataset = self.open()
        except _LANCE_ERRORS as e:
            return ("unknown", f"opening the dataset: {e}")
        first = _FIRST_VERSION if prepared_version is None else int(prepared_version) + 1
        try:
            commits = _job_commits(dataset, str(job), first, dataset.version)
        except _RangeUnreadable as e:
            return ("unknown", e.args[0])
        for recorded in commits:
            if recorded.n == key:
                return ("committed", list(recorded.ids))
        return "not_committed"

    # -- maintenance --------------------------------------------------------------------------------------

    def cleanup_old_versions(
        self,
        older_than: Optional[timedelta] = None,
        retain_versions: Optional[int] = None,
        *,
        retention_watermark: Optional[int] = None,
        delete_unverified: bool = False,
        error_if_tagged_old_versions: bool = True,
    ) -> Optional[Any]:
        """pylance's ``cleanup_old_versions``, never removing a version after ``retention_watermark``.

        ``retention_watermark`` is ``Driver.retention_watermark()``: the version the key in flight was prepared
        against. Its probe reads every version after it; removing them turns its answer into unknown, which only an
        operator can settle. ``None``: nothing is in flight, the policy applies as given. With neither
        ``older_than`` nor ``retain_versions``, versions older than ``DEFAULT_CLEANUP_AGE`` go (pylance's default).

        Returns pylance's ``CleanupStats``, or ``None`` when the watermark leaves no version to remove. Raises
        pylance's error when the cleanup fails (retry it: what was removed stays removed, nothing else changes).
        """
        dataset = self.open()
        if older_than is None and retain_versions is None:
            # pylance applies its default only when no explicit versions are given; ours are, so apply it here.
            older_than = DEFAULT_CLEANUP_AGE
        options = dict(
            delete_unverified=delete_unverified, error_if_tagged_old_versions=error_if_tagged_old_versions
        )
        if retention_watermark is None:
            return dataset.cleanup_old_versions(older_than, retain_versions, **options)
        # Lance removes a version only when it satisfies every filter, so listing the versions up to the watermark
        # clamps the policy exactly as the Rust adapter's `before_version = watermark + 1` does.
        keep_from = int(retention_watermark) + 1
        candidates = [v["version"] for v in dataset.versions() if v["version"] < keep_from]
        if not candidates:
            return None
        return dataset.cleanup_old_versions(older_than, retain_versions, versions=candidates, **options)

    # -- one attempt --------------------------------------------------------------------------------------

    def _attempt(self, commit: Any, results: Union[List[FragmentMetadata], str]) -> Optional[CommitAnswer]:
        """One fenced attempt; ``None`` when a foreign commit took V + 1 and nothing of ours was published (retry
        from a fresh read)."""
        try:
            dataset = self.open()
        except _LANCE_ERRORS as e:
            return ("unknown", f"opening the dataset: {e}")
        read_version = dataset.version
        checked = _key_check(dataset, commit, read_version)
        if checked is not None:
            return checked
        if isinstance(results, str):
            return ("not_landed", results)
        # pylance's Transaction carries the properties (the `transaction_properties` field); read_version is the
        # one the key check read, and the fence lets only read_version + 1 through.
        transaction = lance.Transaction(
            read_version=read_version,
            operation=lance.LanceOperation.Append(results),
            transaction_properties=encode_properties(commit),
        )
        fence = _NextVersionOnly(read_version + 1)
        try:
            lance.LanceDataset.commit(
                self._uri,
                transaction,
                commit_lock=fence,
                storage_options=self._storage_options,
                max_retries=0,
            )
        except _LANCE_ERRORS as e:
            return self._after_failure(e, fence, transaction.uuid)
        return "committed"

    def _after_failure(self, error: Exception, fence: _NextVersionOnly, uuid: str) -> Optional[CommitAnswer]:
        """The outcome of a commit that raised, from how far the fence saw it get; ``None``: retry."""
        if fence.entered:
            # Lance went on to check and write V + 1 and the exit does not say which happened. Our commit can only
            # be at V + 1 (every other version is refused, and there are no retries), so V + 1's transaction
            # decides: ours -> it landed; another -> nothing of ours was published (Lance found it taken).
            return self._read_back(fence.expected, uuid, error)
        if fence.refused:
            # Lance rebased past V + 1 (a foreign commit landed after the key check) and was stopped before writing.
            return None
        if not fence.asked:
            # Lance failed before it reached the lock: no manifest of ours was written.
            return ("not_landed", f"{type(error).__name__}: {error}")
        # Asked for V + 1 yet never entered: pylance's protocol does not allow it; nothing proves either way.
        return ("unknown", f"the fence was asked for {fence.asked} and never entered: {error}")

    def _read_back(self, version: int, uuid: str, error: Exception) -> Optional[CommitAnswer]:
        """Reads who holds ``version`` after a commit that entered the fence for it and raised."""
        try:
            transaction = self.open().read_transaction(version)
        except _LANCE_ERRORS as e:
            return ("unknown", f"the commit of version {version} failed ({error}) and it cannot be read back: {e}")
        if transaction is None:
            return ("unknown", f"the commit of version {version} failed ({error}) and it has no transaction")
        if transaction.uuid == uuid:
            return "committed"
        return None


def _decode_results(results: Sequence[Any]) -> Union[List[FragmentMetadata], str]:
    """The fragments ``results`` carry, or why one is not a Lance fragment (the reason of a not_landed)."""
    fragments = []
    for result in results:
        if result.format != LANCE_FRAGMENT_JSON:
            return (
                f"not a Lance fragment: a Python Lance target commits {LANCE_FRAGMENT_JSON!r} write results, "
                f"not {result.format!r}"
            )
        try:
            text = bytes(result.data).decode()
            if not isinstance(json.loads(text), dict):
                return "not a Lance fragment: not FragmentMetadata JSON: not a JSON object"
            fragments.append(FragmentMetadata.from_json(text))
        except (ValueError, KeyError, TypeError) as e:  # bad UTF-8 or JSON, a missing or unexpected field
            return f"not a Lance fragment: not FragmentMetadata JSON: {type(e).__name__}: {e}"
    return fragments


# ----------------------------------------------------------------------------------------------------------
# Orphan data files


class LanceDataFiles:
    """The data files of the Lance dataset at ``uri``, as ``sinkpoint.Driver.collect_data_files`` asks for them (the
    ``sinkpoint.DataFiles`` protocol): the collector of the data files of dropped attempts (restarted, aborted,
    force-aborted, lost seals) that no commit will ever reference. The Python twin of the Rust
    ``sinkpoint_lance::LanceDataFiles``: the same names, the same refusals.

    Files are named relative to the dataset's root, as Lance's own cleanup names them: ``data/<file>.lance`` for a
    data file (or an overlay), ``_deletions/<fragment>-<version>-<id>.<arrow|bin>`` for a deletion file.

    - :meth:`files_of` names the data files, overlays and deletion file of a ``lance-fragment-json`` write result
      (what :func:`write_fragment`, the Daft sink and :class:`LanceTarget` stage).
    - :meth:`referenced` is every data, overlay and deletion file of every version of the dataset that still
      exists (``versions()``, each version's fragments, until a listing shows no version unread); nothing for a
      dataset that does not exist.
    - :meth:`stat` and :meth:`delete` go through ``pyarrow.fs``: local paths and ``file://`` URIs, ``s3://`` with
      ``storage_options`` (pylance's / object_store's keys: ``aws_access_key_id``, ``aws_secret_access_key``,
      ``aws_session_token``, ``aws_region``, ``aws_endpoint``, ``aws_allow_http``, with or without the ``aws_``
      prefix; unset ones come from the environment), any other URI through ``pyarrow.fs.FileSystem.from_uri``
      (credentials from the environment).

    Refused with ``ValueError`` (the collection stops with ``InvalidInput``): results of another format (the Rust
    adapter's protobuf ``lance`` results: collect them with the Rust ``LanceDataFiles``), files in another base of a
    multi-base dataset, a name that could leave its directory, and datasets with branches (the files their
    versions reference are not read here). Detached versions are not read either (sinkpoint never makes one). It
    keeps no state but its filesystem handle and pickles as its URI and options.
    """

    def __init__(self, uri: str, storage_options: Optional[Dict[str, str]] = None) -> None:
        self._uri = str(uri)
        self._root = self._uri.rstrip("/")
        self._storage_options = dict(storage_options) if storage_options else None
        #: (pyarrow filesystem, the dataset's root in it), opened on first use.
        self._fs: Optional[Tuple[Any, str]] = None

    @property
    def uri(self) -> str:
        """The dataset's URI."""
        return self._uri

    def __repr__(self) -> str:
        return f"LanceDataFiles({self._uri!r})"

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_fs"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)

    def path(self, file: str) -> str:
        """Where ``file`` (a name of :meth:`files_of`) is, as a URI or path under the dataset's: ``<uri>/<file>``."""
        self._split(file)
        return f"{self._root}/{file}"

    # -- the DataFiles protocol ---------------------------------------------------------------------------

    def files_of(self, format: str, data: bytes) -> List[str]:
        """The files the write result ``(format, data)`` names, relative to the dataset's root. Raises
        ``ValueError`` for a result that is not a fragment of this dataset's own directory (see the class docs)."""
        if format != LANCE_FRAGMENT_JSON:
            raise ValueError(
                f"not a Lance fragment: LanceDataFiles names the files of {LANCE_FRAGMENT_JSON!r} write results, "
                f"not {format!r}; collect this job's files with the DataFiles of the table that wrote them"
            )
        try:
            text = bytes(data).decode()
            if not isinstance(json.loads(text), dict):
                raise ValueError("not a JSON object")
            fragment = FragmentMetadata.from_json(text)
        except (ValueError, KeyError, TypeError) as e:  # bad UTF-8 or JSON, a missing or unexpected field
            raise ValueError(f"not FragmentMetadata JSON: {type(e).__name__}: {e}") from None
        data_files = list(fragment.files) + [o.data_file for o in fragment.overlays]
        files = []
        for data_file in data_files:
            if data_file.base_id is not None:
                raise ValueError(
                    f"data file {str(data_file.path)!r} is in base {data_file.base_id} of a multi-base Lance dataset: "
                    "LanceDataFiles collects files of the dataset's own data directory only"
                )
            files.append(self._name(_DATA_DIR, str(data_file.path)))
        deletion = fragment.deletion_file
        if deletion is not None:
            if deletion.base_id is not None:
                raise ValueError(
                    f"the deletion file of fragment {fragment.id} is in base {deletion.base_id} of a multi-base "
                    "Lance dataset: LanceDataFiles collects files of the dataset's own directory only"
                )
            relative = str(deletion.path(fragment.id))
            files.append(self._name(_DELETIONS_DIR, relative[len(_DELETIONS_DIR) + 1:]))
        return files

    def referenced(self) -> Set[str]:
        """Every data, overlay and deletion file of every version of the dataset that still exists, spelled as
        :meth:`files_of` spells them (a file of another base as ``<base N>/...``, never one of its names); nothing
        when there is no dataset. Raises pylance's error when the dataset cannot be read, and ``ValueError`` when
        it has branches."""
        dataset = self._open()
        if dataset is None:
            return set()
        branches = dataset.branches.list()
        if branches:
            raise ValueError(
                f"the Lance dataset at {self._uri} has branches ({sorted(branches)[:3]}): LanceDataFiles does not "
                "read the files their versions reference, so it cannot tell which files are unreferenced"
            )
        out: Set[str] = set()
        read: Set[int] = set()
        # Until a listing shows no version unread: a commit that lands meanwhile is read too.
        while True:
            unread = sorted(self._versions(dataset) - read)
            if not unread:
                return out
            for version in unread:
                try:
                    fragments = dataset.checkout_version(version).get_fragments()
                except _LANCE_ERRORS:
                    # Cleaned up since the listing: no reader can open it any more. Still listed: a real failure.
                    if version in self._versions(dataset):
                        raise
                    fragments = []
                for fragment in fragments:
                    meta = fragment.metadata
                    for data_file in list(meta.files) + [o.data_file for o in meta.overlays]:
                        out.add(_spell(data_file.base_id, _DATA_DIR, str(data_file.path)))
                    if meta.deletion_file is not None:
                        relative = str(meta.deletion_file.path(meta.id))
                        out.add(_spell(meta.deletion_file.base_id, _DELETIONS_DIR,
                                       relative[len(_DELETIONS_DIR) + 1:]))
                read.add(version)

    def stat(self, file: str) -> Optional[Tuple[int, int]]:
        """``(bytes, modified_ms)`` of ``file`` (a name of :meth:`files_of`), or ``None`` when it does not exist.
        Raises ``OSError`` when the storage cannot tell."""
        import pyarrow.fs as pafs

        fs, path = self._location(file)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return None
        if info.type != pafs.FileType.File:
            raise ValueError(f"{file} in {self._uri} is not a file ({info.type})")
        if info.mtime_ns is None:
            raise OSError(f"the storage of {self._uri} reports no modification time for {file}")
        return (int(info.size or 0), int(info.mtime_ns) // 1_000_000)

    def delete(self, file: str) -> None:
        """Deletes ``file`` (a name of :meth:`files_of`); a file already gone is not an error."""
        import pyarrow.fs as pafs

        fs, path = self._location(file)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass
        except OSError:
            if fs.get_file_info(path).type != pafs.FileType.NotFound:
                raise

    # -- internals ----------------------------------------------------------------------------------------

    @staticmethod
    def _name(directory: str, name: str) -> str:
        """``<directory>/<name>``; refused when ``name`` is not one plain file name."""
        if not _is_plain_name(name):
            raise ValueError(
                f"a Lance fragment names the file {name!r}, which is not one file of the {directory} directory: the "
                "write result is damaged"
            )
        return f"{directory}/{name}"

    def _split(self, file: str) -> Tuple[str, str]:
        directory, _, name = str(file).partition("/")
        if directory not in (_DATA_DIR, _DELETIONS_DIR) or not _is_plain_name(name):
            raise ValueError(
                f"{file!r} is not a file of a Lance dataset's own data directory ('{_DATA_DIR}/<file>' or "
                f"'{_DELETIONS_DIR}/<file>'): pass a name LanceDataFiles.files_of gave"
            )
        return directory, name

    def _location(self, file: str) -> Tuple[Any, str]:
        """The filesystem and the path in it of ``file``; refused for a name :meth:`files_of` does not give."""
        directory, name = self._split(file)
        fs, root = self._filesystem()
        return fs, f"{root}/{directory}/{name}"

    def _filesystem(self) -> Tuple[Any, str]:
        if self._fs is None:
            self._fs = _filesystem(self._root, self._storage_options)
        return self._fs

    def _open(self) -> Optional[lance.LanceDataset]:
        """The dataset at its latest version, or ``None`` when there is none at the URI (no ``_versions``)."""
        import pyarrow.fs as pafs

        try:
            return lance.dataset(self._uri, storage_options=self._storage_options)
        except _LANCE_ERRORS:
            fs, root = self._filesystem()
            if fs.get_file_info(f"{root}/_versions").type == pafs.FileType.NotFound:
                return None
            raise

    def _versions(self, dataset: lance.LanceDataset) -> Set[int]:
        return {int(v["version"]) for v in dataset.versions()}


#: The directories of a Lance dataset's data files and deletion files, under its root.
_DATA_DIR = "data"
_DELETIONS_DIR = "_deletions"


def _is_plain_name(name: str) -> bool:
    """Whether ``name`` is one plain file name: no directory, nothing that could leave one."""
    return (
        bool(name)
        and name not in (".", "..")
        and "/" not in name
        and "\\" not in name
        and "://" not in name
        and not any(ord(c) < 32 or ord(c) == 127 for c in name)
    )


def _spell(base_id: Optional[int], directory: str, name: str) -> str:
    """A referenced file's name: as :meth:`LanceDataFiles.files_of` names it, or, in another base, a name it never
    gives."""
    if base_id is None:
        return f"{directory}/{name}"
    return f"<base {base_id}>/{directory}/{name}"


def _filesystem(uri: str, storage_options: Optional[Mapping[str, str]]) -> Tuple[Any, str]:
    """The ``pyarrow.fs`` filesystem of ``uri`` and the path of ``uri`` in it (no trailing slash)."""
    import pyarrow.fs as pafs

    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri).rstrip("/") or "/"
    scheme, rest = uri.split("://", 1)
    if scheme.lower() in ("s3", "s3a"):
        return _s3_filesystem(storage_options or {}), rest.rstrip("/")
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/")


def _s3_filesystem(options: Mapping[str, str]) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` from object_store's (pylance's) S3 options."""
    import pyarrow.fs as pafs

    lowered = {str(k).lower(): str(v) for k, v in options.items()}

    def get(*names: str) -> Optional[str]:
        for name in names:
            for key in (f"aws_{name}", name):
                if key in lowered:
                    return lowered[key]
        return None

    def true(value: Optional[str]) -> bool:
        return value is not None and value.strip().lower() in ("1", "true", "yes", "on")

    kwargs: Dict[str, Any] = {}
    key, secret = get("access_key_id"), get("secret_access_key")
    if key is not None and secret is not None:
        kwargs.update(access_key=key, secret_key=secret)
        token = get("session_token", "token")
        if token is not None:
            kwargs["session_token"] = token
    region = get("region", "default_region")
    if region is not None:
        kwargs["region"] = region
    endpoint = get("endpoint", "endpoint_url")
    if endpoint is not None:
        if "://" in endpoint:
            scheme, endpoint = endpoint.split("://", 1)
            kwargs["scheme"] = scheme
        kwargs["endpoint_override"] = endpoint.rstrip("/")
    if true(get("allow_http")) and "scheme" not in kwargs:
        kwargs["scheme"] = "http"
    if true(get("virtual_hosted_style_request")):
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)
