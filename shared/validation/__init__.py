"""CacheBackend admission validation: field errors, the ordered rule list, validate()."""

from shared.validation.context import RuleContext
from shared.validation.field_errors import ErrorType, FieldError, FieldPath, aggregate_message
from shared.validation.rules import RULES, Rule, validate, warnings

__all__ = [
    "RULES",
    "ErrorType",
    "FieldError",
    "FieldPath",
    "Rule",
    "RuleContext",
    "aggregate_message",
    "validate",
    "warnings",
]
