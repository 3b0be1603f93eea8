"""A pydantic validation error as one plain sentence: what was expected and what was given.

pydantic's own wording ("Value error, ...", "Input should be a valid integer, unable to parse
string as an integer") speaks of the library, not of the flag the user typed.
"""

from __future__ import annotations

from pydantic_core import ErrorDetails

# pydantic's error types (pydantic_core's ErrorType) and the sentence each becomes; ctx holds
# the bound (ge, le, ...) and `given` the input as typed.
_SENTENCES = {
    "int_parsing": "expected a whole number, got {given}",
    "int_from_float": "expected a whole number, got {given}",
    "float_parsing": "expected a number, got {given}",
    "bool_parsing": "expected true or false, got {given}",
    "greater_than_equal": "must be at least {ge}, got {given}",
    "greater_than": "must be more than {gt}, got {given}",
    "less_than_equal": "must be at most {le}, got {given}",
    "less_than": "must be less than {lt}, got {given}",
    "literal_error": "expected one of {expected}, got {given}",
    "finite_number": "expected a finite number, got {given}",
}


def plain_message(error: ErrorDetails) -> str:
    """The sentence for one of ``ValidationError.errors()``."""
    kind = error["type"]
    ctx = dict(error.get("ctx") or {})
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])  # the validator's own sentence, without "Value error, "
    sentence = _SENTENCES.get(kind)
    if sentence is None:
        return error["msg"]
    return sentence.format(given=repr(error.get("input")), **{k: str(v) for k, v in ctx.items()})
