"""The sample contract, shared by the recipe side and the loader side.

* ``Conversation`` / ``Message`` / ``Part`` (``conversation.py``): what every record format
  becomes before a template renders it.
* ``check_sample`` and friends (``contract.py``): what the Loader accepts as a sample (token
  arrays, labels, provenance), with typed errors for everything else.
* ``reject_entry`` (``rejects.py``): one line of a rejects file, the same for every entry point.
* ``ErrorBudget`` (``budget.py``): how many bad samples a run tolerates before it stops.
"""

from chute.sample.budget import ErrorBudget
from chute.sample.contract import as_tokenized, bad_values, check_sample, check_values, location_of
from chute.sample.conversation import Conversation, Message, Part, check_role_order
from chute.sample.rejects import reject_entry

__all__ = [
    "Conversation",
    "ErrorBudget",
    "Message",
    "Part",
    "as_tokenized",
    "bad_values",
    "check_role_order",
    "check_sample",
    "check_values",
    "location_of",
    "reject_entry",
]
