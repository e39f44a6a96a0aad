"""chute: feeds PyTorch training of LLMs and multimodal LLMs from instruction and pretraining data.

The public API lives here; implementation modules may change between releases. Names are
imported lazily on first use (PEP 562), so ``from chute import JsonlSource`` does not pay for
tokenizers, Jinja or the loader, and ``chute --help`` starts fast.

Example:
    >>> from chute import World
    >>> World(rank=1, world_size=2).rank
    1
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chute._internal.lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "ErrorBudget": "chute.sample",
    "Cache": "chute.cache",
    "PreprocessConfig": "chute.cache",
    "open_cache": "chute.cache",
    "preprocess": "chute.mixture",
    "Mixture": "chute.mixture",
    "MixtureEntry": "chute.mixture",
    "Collate": "chute.collate",
    "PackedCollate": "chute.collate",
    "PreferenceCollate": "chute.collate",
    "PackedPreferenceCollate": "chute.collate",
    "KTOCollate": "chute.collate",
    "Conversation": "chute.sample",
    "Message": "chute.sample",
    "Part": "chute.sample",
    "CacheError": "chute.errors",
    "ChunkFailed": "chute.errors",
    "ChuteError": "chute.errors",
    "ConfigError": "chute.errors",
    "ErrorBudgetExceeded": "chute.errors",
    "FingerprintMismatch": "chute.errors",
    "LoaderTimeout": "chute.errors",
    "MissingDependency": "chute.errors",
    "LockstepError": "chute.errors",
    "RemoteError": "chute.errors",
    "SampleError": "chute.errors",
    "SourceChanged": "chute.errors",
    "SourceError": "chute.errors",
    "StateMismatch": "chute.errors",
    "FormatSpec": "chute.formats",
    "detect_format": "chute.formats",
    "sniff_format": "chute.formats",
    "Lengths": "chute.lengths",
    "lengths_of": "chute.lengths",
    "Loader": "chute.loader",
    "WorkerOptions": "chute.loader",
    "DecodeOptions": "chute.media",
    "DynamicImageTokens": "chute.media",
    "DynamicResolution": "chute.media",
    "FixedImageTokens": "chute.media",
    "ImageTransform": "chute.media",
    "MediaCollate": "chute.collate",
    "ContextParallelCollate": "chute.collate",
    "SequenceParallelCollate": "chute.collate",
    "MediaStage": "chute.media",
    "PixelStore": "chute.media",
    "BudgetPlanner": "chute.plan",
    "GroupedPlanner": "chute.plan",
    "PackedPlanner": "chute.plan",
    "Plan": "chute.plan",
    "Planner": "chute.plan",
    "RandomPlanner": "chute.plan",
    "Recipe": "chute.recipe",
    "RecipeContract": "chute.recipe",
    "JsonlSource": "chute.sources",
    "ParquetSource": "chute.sources",
    "Record": "chute.sources",
    "RemoteOptions": "chute.remote_options",
    "TarSource": "chute.sources",
    "open_source": "chute.sources",
    "JinjaTemplate": "chute.templates",
    "get_template": "chute.templates",
    "Tokenizer": "chute.tokenize",
    "load_tokenizer": "chute.tokenize",
    "World": "chute.world",
}

__all__ = [
    "BudgetPlanner",
    "Cache",
    "CacheError",
    "ChunkFailed",
    "ChuteError",
    "Collate",
    "ConfigError",
    "ContextParallelCollate",
    "Conversation",
    "DecodeOptions",
    "DynamicImageTokens",
    "DynamicResolution",
    "ErrorBudget",
    "ErrorBudgetExceeded",
    "FingerprintMismatch",
    "FixedImageTokens",
    "FormatSpec",
    "GroupedPlanner",
    "ImageTransform",
    "JinjaTemplate",
    "JsonlSource",
    "KTOCollate",
    "Lengths",
    "Loader",
    "LoaderTimeout",
    "LockstepError",
    "MediaCollate",
    "MediaStage",
    "Message",
    "MissingDependency",
    "Mixture",
    "MixtureEntry",
    "PackedCollate",
    "PackedPlanner",
    "PackedPreferenceCollate",
    "ParquetSource",
    "Part",
    "PixelStore",
    "Plan",
    "Planner",
    "PreferenceCollate",
    "PreprocessConfig",
    "RandomPlanner",
    "Recipe",
    "RecipeContract",
    "Record",
    "RemoteError",
    "RemoteOptions",
    "SampleError",
    "SequenceParallelCollate",
    "SourceChanged",
    "SourceError",
    "StateMismatch",
    "TarSource",
    "Tokenizer",
    "WorkerOptions",
    "World",
    "__version__",
    "detect_format",
    "get_template",
    "lengths_of",
    "load_tokenizer",
    "open_cache",
    "open_source",
    "preprocess",
    "sniff_format",
]


# old public name -> (the name it became, where that lives): each use warns, then resolves
_RENAMED: dict[str, tuple[str, str]] = {
    "Dataset": ("MixtureEntry", "chute.mixture"),
}


_export, __dir__ = lazy_exports("chute", _EXPORTS, globals())


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        from chute._internal.deprecation import renamed_attribute

        return renamed_attribute("chute", name, *_RENAMED[name])
    return _export(name)


if TYPE_CHECKING:  # static analysers and IDEs see the real names
    from chute.cache import Cache, PreprocessConfig, open_cache
    from chute.collate import (
        Collate,
        ContextParallelCollate,
        KTOCollate,
        MediaCollate,
        PackedCollate,
        PackedPreferenceCollate,
        PreferenceCollate,
        SequenceParallelCollate,
    )
    from chute.errors import (
        CacheError,
        ChunkFailed,
        ChuteError,
        ConfigError,
        ErrorBudgetExceeded,
        FingerprintMismatch,
        LoaderTimeout,
        LockstepError,
        MissingDependency,
        RemoteError,
        SampleError,
        SourceChanged,
        SourceError,
        StateMismatch,
    )
    from chute.formats import FormatSpec, detect_format, sniff_format
    from chute.lengths import Lengths, lengths_of
    from chute.loader import Loader, WorkerOptions
    from chute.media import (
        DecodeOptions,
        DynamicImageTokens,
        DynamicResolution,
        FixedImageTokens,
        ImageTransform,
        MediaStage,
        PixelStore,
    )
    from chute.mixture import Mixture, MixtureEntry, preprocess
    from chute.plan import (
        BudgetPlanner,
        GroupedPlanner,
        PackedPlanner,
        Plan,
        Planner,
        RandomPlanner,
    )
    from chute.recipe import Recipe, RecipeContract
    from chute.remote_options import RemoteOptions
    from chute.sample import Conversation, ErrorBudget, Message, Part
    from chute.sources import (
        JsonlSource,
        ParquetSource,
        Record,
        TarSource,
        open_source,
    )
    from chute.templates import JinjaTemplate, get_template
    from chute.tokenize import Tokenizer, load_tokenizer
    from chute.world import World

    # typed code that still says chute.Dataset keeps checking; at run time it warns (_RENAMED)
    Dataset = MixtureEntry
