"""The recipe layer: one record into one sample, and passes that run a recipe over a source.

* ``Recipe``: format adapter + chat template + tokenizer + media token counts
  (``recipe.py``), built on ``encode`` (conversation -> ``input_ids``/``labels``, ``encode.py``);
  long documents cut into windows (``windows.py``), whole exchanges dropped to fit
  (``truncate.py``), preference pairs and rated completions (``preference.py``).
* ``RecipeOptions``: every option of a recipe, declared once (keyword, config key, flag, doc;
  ``options.py``); its groups as checked values: ``LengthPolicy`` (``length.py``),
  ``TokenizerSpec``, ``TemplateSpec`` and ``MediaSpec`` (``specs.py``).
* ``RecipeContract``: what the layers above read of a recipe, checked where one enters
  (``as_recipe``; ``contract.py``); one strategy per ``task`` (``tasks.py``).
* ``validate_source``: any check (a ``Recipe`` is one) over every record, in parallel, with
  rejects counted by kind (``validate.py``).
"""

from chute.recipe.contract import PlainRecipe, RecipeBase, RecipeContract, as_recipe
from chute.recipe.encode import Encoded, encode, fit_length
from chute.recipe.length import LengthPolicy
from chute.recipe.options import RecipeOptions
from chute.recipe.recipe import (
    MAX_RECORD_BYTES,
    MAX_TURNS,
    OVERFLOW,
    RECIPE_VERSION,
    TASKS,
    TRUNCATION,
    Recipe,
)
from chute.recipe.specs import MediaSpec, TemplateSpec, TokenizerSpec
from chute.recipe.validate import ValidationReport, check_json_object, validate_source

__all__ = [
    "MAX_RECORD_BYTES",
    "MAX_TURNS",
    "OVERFLOW",
    "RECIPE_VERSION",
    "TASKS",
    "TRUNCATION",
    "Encoded",
    "LengthPolicy",
    "MediaSpec",
    "PlainRecipe",
    "Recipe",
    "RecipeBase",
    "RecipeContract",
    "RecipeOptions",
    "TemplateSpec",
    "TokenizerSpec",
    "ValidationReport",
    "as_recipe",
    "check_json_object",
    "encode",
    "fit_length",
    "validate_source",
]
