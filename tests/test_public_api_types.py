"""``Any`` in the public API only where it is explained.

mypy runs strict over the package (``make lint``), but ``Any`` passes strict checking, so this
test walks the signatures of everything in ``chute.__all__`` (functions, and classes' public
methods and ``__init__``) and fails on an ``Any`` that is not listed below with its reason.
``dict[str, Any]`` / ``Mapping[str, Any]`` (JSON objects: configs, records, states, reports)
are allowed everywhere. A new ``Any`` needs a precise type, or a line here saying why not.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator

import chute

JSON_RECORD = "a record's parsed JSON: any JSON value, its shape is the format adapter's concern"
ACCEPTS_MANY = "accepts several forms, each documented in the docstring (a path, a name, an object)"
LAZY = "the type lives in a module imported on first use, to keep `import chute` light"
DUCK = "any object with the documented methods (duck-typed: users pass their own)"
ARRAY_LIKE = "any array-like of lengths: a numpy array, a memory-mapped .npy, a Lengths, a list"

EXPLAINED: dict[str, str] = {
    # records and their data
    "Recipe.batch:records": JSON_RECORD,
    "RecipeContract.batch:records": JSON_RECORD,
    "Recipe.conversation:record": JSON_RECORD,
    "Recipe.format_of:record": JSON_RECORD,
    "Recipe.process:data": JSON_RECORD,
    "Recipe.render:record": JSON_RECORD,
    "detect_format:data": JSON_RECORD,
    "sniff_format:records": JSON_RECORD,
    "FingerprintMismatch.__init__:fields": "the differing values of a config field: any JSON value",
    # one argument, several documented forms
    "Recipe.__init__:tokenizer": ACCEPTS_MANY,
    "Recipe.__init__:template": ACCEPTS_MANY,
    "Recipe.__init__:image_tokens": ACCEPTS_MANY,
    "load_tokenizer:tokenizer": ACCEPTS_MANY,
    "get_template:value": ACCEPTS_MANY,
    "get_template:tokenizer": ACCEPTS_MANY,
    "MixtureEntry.__init__:recipe": ACCEPTS_MANY,
    "MixtureEntry.with_amounts:amounts": "weight, repeat, samples or max_samples: numbers or None",
    "Cache.check_recipe:recipe": ACCEPTS_MANY,
    "Recipe.with_image_transform:transform": DUCK + " (an image transform: ImageTransform, "
    "DynamicResolution, a tiler, anything with fingerprint() whose geometry maps)",
    "open_cache:recipe": ACCEPTS_MANY,
    "preprocess:config": ACCEPTS_MANY,
    "preprocess:kwargs": "chute.cache.preprocess's or preprocess_mixture's keywords, by config",
    "preprocess:return": "a PreprocessReport, or a MixtureReport for a mixture's config",
    "Loader.__init__:source": ACCEPTS_MANY + "; any map-style dataset too",
    "Loader.__init__:recipe": "any callable from an item to a sample dict (a Recipe is one)",
    "Loader.__init__:media": ACCEPTS_MANY,
    "Loader.__init__:mixture": ACCEPTS_MANY,
    "Loader.__init__:multiprocessing_context": "what torch's DataLoader takes: a name or a context",
    "WorkerOptions.__init__:multiprocessing_context": "what torch's DataLoader takes, as Loader's",
    "lengths_of:source": ACCEPTS_MANY,
    "lengths_of:recipe": "any callable from an item to a sample dict (a Recipe is one)",
    "DynamicResolution.__init__:normalize": ACCEPTS_MANY + " (a preset name or (mean, std))",
    "ImageTransform.__init__:normalize": ACCEPTS_MANY + " (a preset name or (mean, std))",
    "MediaCollate.__init__:dtype": "a torch dtype; torch is imported lazily",
    # lengths
    "BudgetPlanner.__init__:lengths": ARRAY_LIKE,
    "GroupedPlanner.__init__:lengths": ARRAY_LIKE,
    "PackedPlanner.__init__:lengths": ARRAY_LIKE,
    "Lengths.__init__:pieces": ARRAY_LIKE,
    # user-supplied objects
    "MediaStage.__init__:image": DUCK,
    "MediaStage.__init__:video": DUCK,
    "MediaStage.__init__:audio": DUCK,
    "MediaStage.__init__:store": DUCK,
    "MediaStage.bind:recipe": DUCK,
    "PixelStore.__init__:transform": DUCK,
    "PixelStore.check_transform:transform": DUCK,
    # returns of lazily imported types
    "Cache.media_paths:return": LAZY,
    "Cache.media_stage:return": LAZY,
    "Cache.recipe_config:return": LAZY,
}

_JSON_OBJECT = re.compile(r"(dict|Mapping|MutableMapping)\[str, Any\]")


def _signatures() -> Iterator[tuple[str, inspect.Signature]]:
    for name in chute.__all__:
        obj = getattr(chute, name)
        members = []
        if inspect.isclass(obj):
            members = [
                (f"{name}.{attr}", value)
                for attr, value in vars(obj).items()
                if callable(value) and (not attr.startswith("_") or attr == "__init__")
            ]
        elif callable(obj):
            members = [(name, obj)]
        for qualified, fn in members:
            try:
                yield qualified, inspect.signature(fn)
            except (TypeError, ValueError):  # builtins and C types: nothing to read
                continue


def _anys() -> set[str]:
    found = set()
    for qualified, sig in _signatures():
        annotated = [(p.name, p.annotation) for p in sig.parameters.values()]
        annotated.append(("return", sig.return_annotation))
        for param, annotation in annotated:
            if "Any" in _JSON_OBJECT.sub("", str(annotation)):
                found.add(f"{qualified}:{param}")
    return found


def test_every_any_in_the_public_api_is_explained() -> None:
    unexplained = sorted(_anys() - set(EXPLAINED))
    assert not unexplained, (
        "Any in the public API without a reason (give a precise type, or add it to EXPLAINED "
        f"with why): {unexplained}"
    )


def test_every_explanation_is_still_needed() -> None:
    stale = sorted(set(EXPLAINED) - _anys())
    assert not stale, f"EXPLAINED lists signatures that no longer take Any: {stale}"
