"""The offline token cache: ``preprocess`` writes it, ``open_cache`` reads it (docs/cache.md)."""

from chute.cache.build import PreprocessReport, preprocess
from chute.cache.config import CacheOptions, PreprocessConfig, RecipeConfig, load_config
from chute.cache.layout import FORMAT_VERSION
from chute.cache.reader import Cache, is_cache_dir, open_cache
from chute.cache.schema import labels_from_spans
from chute.cache.stages import ChunkStage, register_stage

__all__ = [
    "FORMAT_VERSION",
    "Cache",
    "CacheOptions",
    "ChunkStage",
    "PreprocessConfig",
    "PreprocessReport",
    "RecipeConfig",
    "is_cache_dir",
    "labels_from_spans",
    "load_config",
    "open_cache",
    "preprocess",
    "register_stage",
]
