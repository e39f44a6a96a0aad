"""The curated public API: every exported name resolves, and importing chute stays light."""

from __future__ import annotations

import subprocess
import sys

import chute


def test_all_lists_exactly_the_lazy_exports() -> None:
    assert sorted(chute.__all__) == sorted([*chute._EXPORTS, "__version__"])


def test_every_public_name_resolves() -> None:
    for name in chute.__all__:
        assert getattr(chute, name) is not None, name


def test_importing_a_source_does_not_import_tokenizers_jinja_or_torch() -> None:
    code = (
        "import sys; from chute import JsonlSource, World;"
        "print(sorted(m for m in ('torch', 'tokenizers', 'jinja2', 'chute.loader') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_media_package_exports_every_name_lazily() -> None:
    import chute.media

    assert sorted(chute.media.__all__) == sorted(chute.media._EXPORTS)
    for name in chute.media.__all__:
        assert getattr(chute.media, name) is not None, name


def test_a_text_recipe_does_not_import_the_media_stages() -> None:
    # the recipe imports chute.media.refs for every dataset; the package must not pull the
    # loader's media stage, the pixel store, audio or the anyres tiles with it
    heavy = ("chute.media.stage", "chute.media.store", "chute.media.audio", "chute.media.tiles")
    code = f"import sys, chute.recipe; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
