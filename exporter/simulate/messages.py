"""Pydantic validation errors as one line each: the dotted field a user wrote, and what is wrong."""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

# Error types whose message the models wrote for people (PydanticCustomError): used as is.
CUSTOM_ERROR_TYPES = frozenset({"duration", "profile", "hardware", "event", "expected_alerts"})


def describe_error(error: ErrorDetails, root: type[BaseModel]) -> tuple[str, str]:
    """(field path like ``events[2].gpu``, what is wrong) for one error validating `root`."""
    loc = list(error["loc"])
    kind = error["type"]
    ctx = error.get("ctx") or {}
    path = _user_path(root, loc)
    if kind == "missing":
        what = "is required"
    elif kind == "extra_forbidden":
        what = "unknown field"
        fields = _fields_of(_type_at(root, loc[:-1]))
        if fields:
            what += f"; expected one of {', '.join(fields)}"
    elif kind in ("union_tag_invalid", "union_tag_not_found"):
        path.append(str(ctx.get("discriminator", "type")).strip("'"))
        tags = ", ".join(_tags_of(_type_at(root, loc)))
        if kind == "union_tag_invalid":
            what = f"must be one of {tags}, got {ctx.get('tag')!r}"
        else:
            what = f"is required: one of {tags}"
    elif kind == "value_error":
        what = str(ctx.get("error", error["msg"]))
    elif kind in CUSTOM_ERROR_TYPES:
        what = error["msg"]
    else:
        what = error["msg"][:1].lower() + error["msg"][1:]
        value = error.get("input")
        if isinstance(value, str | int | float | bool) or value is None:
            what += f" (got {as_yaml(value)})"
        elif isinstance(value, list | dict):
            what += f" (got {kind_of(value)})"
    return dotted(path), what


def dotted(loc: list[int | str]) -> str:
    """``["events", 2, "gpu"]`` as ``events[2].gpu``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def as_yaml(value: str | int | float | bool | None) -> str:
    """A scalar as the user wrote it in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def kind_of(value: object) -> str:
    """What sort of YAML value this is, in words."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


def _user_path(root: type[BaseModel], loc: list[int | str]) -> list[int | str]:
    """`loc` without the tags pydantic inserts for discriminated unions (``events.2.xid.at``)."""
    path: list[int | str] = []
    current: Any = root
    for part in loc:
        member = _tagged_member(current, part)
        if member is not None:
            current = member
            continue
        path.append(part)
        current = _step(current, part)
    return path


def _type_at(root: type[BaseModel], loc: list[int | str]) -> Any:
    current: Any = root
    for part in loc:
        current = _tagged_member(current, part) or _step(current, part)
    return current


def _fields_of(annotation: Any) -> list[str]:
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [field.alias or name for name, field in annotation.model_fields.items()]
    return []


def _tags_of(annotation: Any) -> list[str]:
    """The Literal tags of a discriminated union's members, in order."""
    annotation = _unwrap(annotation)
    if get_origin(annotation) not in (Union, types.UnionType):
        return []
    return [
        str(get_args(field.annotation)[0])
        for member in get_args(annotation)
        for field in getattr(member, "model_fields", {}).values()
        if get_origin(field.annotation) is Literal and len(get_args(field.annotation)) == 1
    ]


def _tagged_member(annotation: Any, part: int | str) -> Any:
    """The member of a discriminated union whose Literal tag is `part`, else None."""
    annotation = _unwrap(annotation)
    if isinstance(part, int) or get_origin(annotation) not in (Union, types.UnionType):
        return None
    for member in get_args(annotation):
        for field in getattr(member, "model_fields", {}).values():
            if get_origin(field.annotation) is Literal and get_args(field.annotation) == (part,):
                return member
    return None


def _step(annotation: Any, part: int | str) -> Any:
    """The type one location step inside `annotation`, or None when it cannot be told."""
    annotation = _unwrap(annotation)
    if isinstance(part, int):
        return get_args(annotation)[0] if get_origin(annotation) is list else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            if (field.alias or name) == part:
                return field.annotation
    return None


def _unwrap(annotation: Any) -> Any:
    """`annotation` without Annotated[...] and Optional[...]."""
    while True:
        if get_origin(annotation) is Annotated:
            annotation = get_args(annotation)[0]
        elif get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(
            annotation
        ):
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation
