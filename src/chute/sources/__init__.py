"""Sources: records with provenance, read in place (local files or object storage)."""

from chute.remote_options import RemoteOptions
from chute.sources.base import FileSource, expand_paths
from chute.sources.index import FileIndex, open_index
from chute.sources.jsonl import JsonlSource
from chute.sources.parquet import ParquetSource, open_parquet
from chute.sources.record import Record, parse_json
from chute.sources.select import open_source
from chute.sources.tar import TarRecord, TarSource
from chute.sources.tar_index import TarIndex, open_tar_index

__all__ = [
    "FileIndex",
    "FileSource",
    "JsonlSource",
    "ParquetSource",
    "Record",
    "RemoteOptions",
    "TarIndex",
    "TarRecord",
    "TarSource",
    "expand_paths",
    "open_index",
    "open_parquet",
    "open_source",
    "open_tar_index",
    "parse_json",
]
