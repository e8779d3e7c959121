"""The Lance target of the ``sinkpoint`` package: the worker-side helpers over pylance 14.0.2, the native
:class:`LanceTarget` and the orphan data-file collector :class:`LanceDataFiles`. The design is in
``docs/protocols/lance.md`` and ``docs/protocols/python.md``.

- Workers call :func:`write_fragment` (uncommitted fragments, invisible to readers) and stage each fragment as a
  ``lance-fragment-json`` write result (``sinkpoint.WriteResult.from_lance_fragment`` or :func:`fragment_json`).
- The driver passes a :class:`LanceTarget` to ``sinkpoint.Driver``. It is the Rust adapter
  (``sinkpoint_lance::LanceTarget``) compiled into the wheel, and the driver commits through it without calling
  back into Python: each key is one Append carrying the ``sinkpoint.*`` transaction properties, checked against
  the versions since the key's intent and written through Lance's conditional-put commit handler, fenced so that
  only version V + 1 (V being the version it checked) can be written. A writer racing it (another sinkpoint job,
  a plain pylance append) either lands first, and the commit is checked again past it, or finds the version
  taken: no commit overwrites another.
- Drivers: the V + 1 fence keeps commits from overwriting each other, not a second driver of the job from
  committing the same inputs. That is the store's epoch, and it reaches every driver in two deployments only:
  every driver opens the same store file (one machine), or each has its own store file and all share one mirror
  (several machines; the newer driver fences the older, whose next call raises ``FencedError``). Two drivers of
  one job with separate store files and no mirror are not fenced: both can commit the same inputs, and rows can
  land twice.
- Maintenance calls ``LanceTarget.cleanup_old_versions`` with ``Driver.retention_watermark()``, and
  ``Driver.collect_data_files(LanceDataFiles(uri))`` to delete the data files of dropped attempts (restarted,
  aborted, lost seals) that no commit will ever reference.

Every function and class here takes the dataset's ``uri`` as a ``str`` or an ``os.PathLike`` and
``storage_options`` as a mapping of ``str`` to ``str``; anything else is a ``TypeError`` naming the argument, raised
before anything is written.

Importing this module needs pylance and pyarrow (``pip install sinkpoint[lance]``) and the compiled core.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple, Union

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata, write_fragments

from ._sinkpoint import LANCE_FRAGMENT_JSON, CleanupStats, LanceTarget

__all__ = [
    "LANCE_FRAGMENT_JSON",
    "CleanupStats",
    "LanceDataFiles",
    "LanceTarget",
    "create_dataset",
    "fragment_json",
    "write_fragment",
]

# The exceptions pylance raises for its own failures (I/O, not found, conflicts: OSError and its subclass
# CommitConflictError; invalid input and a missing dataset: ValueError).
_LANCE_ERRORS = (OSError, ValueError)


def _uri_arg(uri: Any, name: str = "uri", what: str = "the Lance dataset's path or URI") -> str:
    """``uri`` as a ``str``; a ``TypeError`` naming the argument ``name`` unless it is a ``str`` or an
    ``os.PathLike`` of one (the Daft sink checks its paths and URLs with it too)."""
    if isinstance(uri, str):
        return uri
    if isinstance(uri, os.PathLike):
        path = os.fspath(uri)
        if isinstance(path, str):
            return path
    raise TypeError(f"{name} must be a str or os.PathLike ({what}), not {type(uri).__name__}: {uri!r}")


def _options_arg(options: Any, name: str = "storage_options") -> Optional[Dict[str, str]]:
    """``options`` as a ``dict`` (``None`` stays ``None``); a ``TypeError`` naming the argument ``name`` unless it
    maps ``str`` to ``str``. The message names keys and types, never values: options carry credentials."""
    if options is None:
        return None
    if not isinstance(options, Mapping):
        raise TypeError(
            f'{name} must be a mapping of str to str (e.g. {{"aws_region": "us-east-1"}}), not {type(options).__name__}'
        )
    out: Dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise TypeError(f"{name} must be a mapping of str to str: its key {key!r} is a {type(key).__name__}")
        if not isinstance(value, str):
            raise TypeError(
                f'{name}[{key!r}] must be a str, not {type(value).__name__} (every option is a string, e.g. "true")'
            )
        out[key] = value
    return out


# ----------------------------------------------------------------------------------------------------------
# Worker side


def write_fragment(
    uri: Union[str, "os.PathLike[str]"],
    data: Any,
    schema: Optional[pa.Schema] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    **options: Any,
) -> List[FragmentMetadata]:
    """Writes ``data`` (a ``pyarrow.Table``, ``RecordBatchReader`` or anything ``lance.fragment.write_fragments``
    reads) into the data directory of the dataset at ``uri`` without committing it.

    The fragments are invisible to readers until the driver commits them through :class:`LanceTarget`. Stage each
    one as a write result (``sinkpoint.WriteResult.from_lance_fragment(f)``, or ``format=LANCE_FRAGMENT_JSON``
    with ``data=fragment_json(f)``). The dataset must exist (:func:`create_dataset`); ``data`` must fit its schema.
    Raises pylance's error when the write fails: nothing was staged, retry the task. Files written before a
    failure, or of a checkpoint that is never committed, are unreferenced (Lance's cleanup removes them); those of
    a staged attempt that was dropped are also collected by ``Driver.collect_data_files(LanceDataFiles(uri))``.

    ``options`` are ``write_fragments``' writer settings (``max_rows_per_file``, ``max_rows_per_group``,
    ``max_bytes_per_file``, ``data_storage_version``, ``enable_stable_row_ids``, ...): the rows may become several
    fragments, each staged with the others. ``mode`` is not one of them: fragments are always appended.
    """
    uri, storage_options = _uri_arg(uri), _options_arg(storage_options)
    if "mode" in options:
        raise ValueError("write_fragment always appends: it takes no mode")
    return write_fragments(data, uri, schema=schema, mode="append", storage_options=storage_options, **options)


def fragment_json(fragment: FragmentMetadata) -> bytes:
    """The bytes of a ``lance-fragment-json`` write result for ``fragment``: ``json.dumps(fragment.to_json())``,
    as the binding's ``WriteResult.from_lance_fragment`` and the Rust adapter's ``decode_fragment`` take them."""
    return json.dumps(fragment.to_json()).encode()


def create_dataset(
    uri: Union[str, "os.PathLike[str]"],
    schema: pa.Schema,
    storage_options: Optional[Mapping[str, str]] = None,
    *,
    transaction_properties: Optional[Dict[str, str]] = None,
    data_storage_version: Optional[str] = None,
    enable_stable_row_ids: bool = False,
) -> lance.LanceDataset:
    """The dataset at ``uri``, created empty with ``schema`` if it does not exist yet (the target requires it).
    The creation's commit carries ``transaction_properties``; ``data_storage_version`` and
    ``enable_stable_row_ids`` are the table's settings (pylance's ``write_dataset``), used only when it creates it.

    Safe to call from every process that starts a job: when two create it at once, one creation wins and the
    other opens it. Raises ``ValueError`` when the dataset exists with another schema (nothing is changed: fix the
    schema or the URI), and pylance's error when it can neither be created nor opened (retry; check the URI and
    ``storage_options``).
    """
    uri, storage_options = _uri_arg(uri), _options_arg(storage_options)
    try:
        return lance.write_dataset(
            schema.empty_table(),
            uri,
            schema=schema,
            mode="create",
            storage_options=storage_options,
            transaction_properties=transaction_properties,
            data_storage_version=data_storage_version,
            enable_stable_row_ids=enable_stable_row_ids,
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

    def __init__(
        self, uri: Union[str, "os.PathLike[str]"], storage_options: Optional[Mapping[str, str]] = None
    ) -> None:
        self._uri = _uri_arg(uri)
        self._root = self._uri.rstrip("/")
        self._storage_options = _options_arg(storage_options) or None
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
            files.append(self._name(_DELETIONS_DIR, relative[len(_DELETIONS_DIR) + 1 :]))
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
                        out.add(_spell(meta.deletion_file.base_id, _DELETIONS_DIR, relative[len(_DELETIONS_DIR) + 1 :]))
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
